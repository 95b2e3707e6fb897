from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from cart.services import get_cart, remove_cart_item, set_cart_item
from core.authentication import CachedTokenAuthentication
from core.fields import StrictIntegerField
from core.hotcache import HotCacheApiView
from core.openapi import BODY_ERRORS, ERRORS
from shop.models import SKU_PATTERN


class CartOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Cart"

    class LineSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CartLine"

        sku = serializers.CharField()
        name = serializers.CharField()
        quantity = serializers.IntegerField()
        unit_price = serializers.IntegerField(help_text="Minor units of `currency`, today's catalog price")
        line_total = serializers.IntegerField()
        in_stock = serializers.BooleanField(help_text="A hint: checkout decides")

    class WarningSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CartWarning"

        sku = serializers.CharField()
        code = serializers.CharField()
        message = serializers.CharField()

    items = LineSerializer(many=True)
    total = serializers.IntegerField()
    currency = serializers.CharField()
    warnings = WarningSerializer(many=True)


def cart_json(cart) -> dict:
    """The body CartOutputSerializer documents, built directly: DRF's serializer
    deep-copies its fields on every call and was the largest single cost of a
    cart request (bench/cart.py). tests/cart checks both agree."""
    return {
        "items": [
            {
                "sku": line.sku,
                "name": line.name,
                "quantity": line.quantity,
                "unit_price": line.unit_price,
                "line_total": line.line_total,
                "in_stock": line.in_stock,
            }
            for line in cart.items
        ],
        "total": cart.total,
        "currency": cart.currency,
        "warnings": cart.warnings,
    }


SKU = OpenApiParameter(
    "sku",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=SKU_PATTERN,
    description="1-64 of A-Z a-z 0-9 . _ - (anything else matches no route: 404)",
)

_QUANTITY = StrictIntegerField(min_value=0, max_value=settings.CART_MAX_QUANTITY)


def validated_quantity(data) -> int:
    """What CartItemApi.InputSerializer declares, checked with its one field directly:
    a serializer instance deep-copies its fields on every request (bench/cart.py)."""
    if not isinstance(data, dict) or "quantity" not in data:
        raise serializers.ValidationError({"quantity": ["This field is required."]})
    try:
        return _QUANTITY.run_validation(data["quantity"])
    except serializers.ValidationError as error:
        raise serializers.ValidationError({"quantity": error.detail}) from None


class CartApi(HotCacheApiView):
    authentication_classes = [CachedTokenAuthentication]

    @extend_schema(responses={200: CartOutputSerializer, **ERRORS(401, 503)})
    def get(self, request):
        return Response(cart_json(get_cart(customer_id=request.user.id)))


class CartItemApi(HotCacheApiView):
    authentication_classes = [CachedTokenAuthentication]
    throttle_classes = []  # the write script itself counts the shopper's rate limit (cart/storage.py)

    class InputSerializer(serializers.Serializer):  # the documented body; see validated_quantity
        class Meta:
            ref_name = "CartItemQuantity"

        quantity = StrictIntegerField(min_value=0, max_value=settings.CART_MAX_QUANTITY)

    @extend_schema(
        request=InputSerializer,
        parameters=[SKU],
        responses={200: CartOutputSerializer, **ERRORS(*BODY_ERRORS, 401, 404, 409, 422, 429, 503)},
        description="Set the absolute quantity of one line (idempotent); 0 removes it.",
    )
    def put(self, request, sku: str):
        quantity = validated_quantity(request.data)
        cart = set_cart_item(customer_id=request.user.id, sku=sku, quantity=quantity)
        return Response(cart_json(cart))

    @extend_schema(parameters=[SKU], responses={204: None, **ERRORS(401, 404, 429, 503)})
    def delete(self, request, sku: str):
        remove_cart_item(customer_id=request.user.id, sku=sku)
        return Response(status=204)
