from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import StrictIntegerField
from core.openapi import BODY_ERRORS, ERRORS
from orders.services import ReturnLineRequest, customer_returns, request_return


class ReturnLineInputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "ReturnLineInput"

    sku = serializers.CharField(max_length=64)
    quantity = StrictIntegerField(min_value=1, max_value=10_000)  # as the cart: "1" and 1.0 are refused


class ReturnInputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "NewReturn"

    items = ReturnLineInputSerializer(many=True, min_length=1, max_length=100)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def validate_items(self, items: list[dict]) -> list[dict]:
        if len({item["sku"] for item in items}) != len(items):
            raise serializers.ValidationError("Each SKU at most once.")
        return items


class ReturnOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Return"

    class LineSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ReturnLine"

        sku = serializers.CharField(source="item.product_id")
        quantity = serializers.IntegerField()
        condition = serializers.CharField(help_text="Once received: restock (back on sale) or damaged; else empty")

    id = serializers.IntegerField()
    order_id = serializers.IntegerField()
    status = serializers.CharField(help_text="REQUESTED, APPROVED, REJECTED or RECEIVED")
    reason = serializers.CharField(allow_blank=True)
    lines = LineSerializer(many=True)
    created_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    received_at = serializers.DateTimeField(allow_null=True)
    refund_amount = serializers.IntegerField(
        source="refund.amount", allow_null=True, default=None, help_text="Minor units refunded on receipt"
    )


class OrderReturnsApi(APIView):
    @extend_schema(
        responses={200: ReturnOutputSerializer(many=True), **ERRORS(401, 404, 503)},
        description="The order's returns, newest first.",
    )
    def get(self, request, order_id: int):
        returns = customer_returns(customer_id=request.user.id, order_id=order_id)
        return Response(ReturnOutputSerializer(returns, many=True).data)

    @extend_schema(
        request=ReturnInputSerializer,
        responses={201: ReturnOutputSerializer, **ERRORS(*BODY_ERRORS, 401, 404, 409, 422, 503)},
        description="Ask to send units of a shipped order back, within RETURN_WINDOW_DAYS of shipping: 201 "
        "with the return, REQUESTED (staff approve or reject it, then receive it and refund the received "
        "units at the price paid). 409 `order_not_shipped`, `return_window_closed`, `nothing_to_return` "
        "(every unit returned or in a return already); 422 `sku_not_on_order`, `too_many_units` (more than "
        "can still be returned: each unit is in one return at most). All lines or none.",
    )
    def post(self, request, order_id: int):
        given = ReturnInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        items = given.validated_data["items"]
        lines = [ReturnLineRequest(sku=item["sku"], quantity=item["quantity"]) for item in items]
        returned = request_return(
            customer_id=request.user.id, order_id=order_id, lines=lines, reason=given.validated_data["reason"]
        )
        return Response(ReturnOutputSerializer(returned).data, status=201)
