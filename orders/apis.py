import re

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSetMixin

from core.authentication import CachedTokenAuthentication
from core.hotcache import HotCacheApiView, hot_cache
from core.openapi import BODY_ERRORS, ERRORS, page_serializer
from core.ratelimit import client_address
from orders.exceptions import IdempotencyKeyInvalid, IdempotencyKeyMissing
from orders.models import OrderStatus
from orders.selectors import customer_orders, order_tax_lines
from orders.services import cancel_customer_order, get_customer_order, place_order
from orders.services.payment_sessions import start_payment
from orders.services.queue_admission import QUEUED
from shop.apis import AddressSerializer, DiscountSerializer

TAX_LINE = ("rate", "base", "amount")
_KEY = re.compile(r"^[\x21-\x7e]{1,64}$")


def idempotency_key_from(request) -> str:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        raise IdempotencyKeyMissing()
    if not _KEY.match(key):
        raise IdempotencyKeyInvalid()
    return key


class OrderOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Order"

    class ItemSerializer(serializers.Serializer):
        class Meta:
            ref_name = "OrderItem"

        sku = serializers.CharField(source="product_id")
        name = serializers.CharField()
        quantity = serializers.IntegerField()
        unit_price = serializers.IntegerField(help_text="Minor units; the catalog price when the order was placed")
        discount = serializers.IntegerField(help_text="Minor units off the whole line (promotions)")
        line_total = serializers.IntegerField(help_text="quantity x unit_price - discount, in the catalog's terms")
        tax_rate = serializers.IntegerField(help_text="Basis points (2000: 20%)")
        net = serializers.IntegerField(help_text="The line without tax, as placed")
        tax = serializers.IntegerField(help_text="The line's tax, as placed")
        gross = serializers.IntegerField(help_text="`net` + `tax`: what the line was charged")
        cancelled = serializers.IntegerField(help_text="Units staff removed before shipping (back on sale)")
        returned = serializers.IntegerField(help_text="Units received back from a return")
        refunded = serializers.IntegerField(help_text="Units whose price went back to the shopper")

    id = serializers.IntegerField()
    status = serializers.CharField(
        help_text="QUEUED (queue-mode flash sale, not written yet), PENDING_PAYMENT, PAID, SHIPPED, "
        "CANCELLED, REFUNDED or REJECTED (a queued order the writer could not take: see rejection_reason)"
    )

    class RefundSerializer(serializers.Serializer):
        class Meta:
            ref_name = "OrderRefund"

        class LineSerializer(serializers.Serializer):
            class Meta:
                ref_name = "OrderRefundLine"

            sku = serializers.CharField(required=False, help_text="Units of this SKU (absent: the shipping line)")
            quantity = serializers.IntegerField(required=False)
            shipping = serializers.CharField(required=False, help_text="The shipping method paid back (a whole order)")
            amount = serializers.IntegerField(help_text="Minor units: what was charged for it (tax included)")
            tax = serializers.IntegerField(required=False, help_text="The tax in `amount`")

        id = serializers.IntegerField()
        status = serializers.CharField(help_text="REQUESTED, SUBMITTED (to the provider), COMPLETED or FAILED")
        reason = serializers.CharField(
            help_text="return, goodwill, lines_cancelled, staff (the order refunded before shipping), "
            "order_not_pending, amount_mismatch"
        )
        amount = serializers.IntegerField(help_text="Minor units of the order's currency")
        lines = LineSerializer(many=True, help_text="The units it pays back (empty: an amount, not units)")
        created_at = serializers.DateTimeField()
        completed_at = serializers.DateTimeField(allow_null=True)

    rejection_reason = serializers.CharField(
        allow_blank=True, help_text="REJECTED only: out_of_stock, sku_unavailable, voucher_used_up or queue_lost"
    )
    items = ItemSerializer(many=True)
    subtotal = serializers.SerializerMethodField(help_text="The lines at catalog prices, before discounts")
    discounts = DiscountSerializer(many=True, help_text="The promotions that took something off, as checkout priced")
    shipping = serializers.JSONField(
        allow_null=True,
        help_text="The shipping method as charged: code, name, country, price, discount, net, tax, gross, "
        "taxes (its parts per rate: rate, base, amount); null: nothing shipped",
    )
    prices_include_tax = serializers.BooleanField(help_text="Its prices include tax (extracted) or not (added)")
    tax_country = serializers.CharField(help_text="Whose rates taxed it (where it ships)")
    tax = serializers.IntegerField(source="tax_amount", help_text="The items' tax + shipping's, in `total`")
    tax_lines = serializers.SerializerMethodField(help_text="Per rate, highest first: rate, base (net), amount")
    total = serializers.IntegerField(
        source="total_amount",
        help_text="What is to be paid: the items' gross + shipping's, less the price of lines staff removed "
        "before shipping",
    )
    currency = serializers.CharField()
    shipping_address = AddressSerializer(allow_null=True, help_text="As it was at checkout")
    created_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    paid_at = serializers.DateTimeField(allow_null=True)
    shipped_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    refunds = serializers.SerializerMethodField(
        help_text="The money going back, oldest first: returns, goodwill, removed lines, a refunded order, "
        "a payment that came too late"
    )

    def get_subtotal(self, order) -> int:
        return sum(item.quantity * item.unit_price for item in order.items.all())

    @extend_schema_field(
        {"type": "array", "items": {"type": "object", "properties": {k: {"type": "integer"} for k in TAX_LINE}}}
    )
    def get_tax_lines(self, order) -> list[dict]:
        return order_tax_lines(order)

    @extend_schema_field(RefundSerializer(many=True))
    def get_refunds(self, order) -> list[dict]:
        refunds = sorted(order.refunds.all(), key=lambda refund: refund.id)  # prefetched
        return self.RefundSerializer(refunds, many=True).data if refunds else []  # checkout's answer: none


class CheckoutInputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Checkout"

    shipping_address = AddressSerializer(required=False, help_text="Without it, the saved default address")


class OrderFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=OrderStatus.values, required=False, help_text="Only orders in it")


OrderPageSerializer = page_serializer(OrderOutputSerializer, "OrderPage")


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "pattern": _KEY.pattern, "minLength": 1, "maxLength": 64},
    OpenApiParameter.HEADER,
    required=True,
    description="1-64 visible ASCII characters chosen by the client; the same key returns the same order.",
)
PAGE = OpenApiParameter("page", OpenApiTypes.INT, OpenApiParameter.QUERY, description="1, 2, ... (20 a page)")


class OrdersApi(ViewSetMixin, HotCacheApiView):
    # One handler per action on the one path /api/orders (orders/urls.py maps
    # GET -> list, POST -> create). Checkout is the flash sale's hot path: a
    # refused request makes no SQL query.
    authentication_classes = [CachedTokenAuthentication]
    throttle_classes = []  # checkout's rate limit is counted by its admission script (orders/services/admission.py)

    @extend_schema(
        operation_id="orders_list",
        parameters=[PAGE, OrderFilterSerializer],
        responses={200: OrderPageSerializer, **ERRORS(400, 401, 503), 404: ERRORS(404)[404]},
        description="The shopper's orders, newest first (`?status=` keeps one status). 404 for a page past the last.",
    )
    def list(self, request):
        hot_cache.check_generation()  # a token revoked elsewhere is refused here too, at once
        filters = OrderFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        orders = customer_orders(customer_id=request.user.id, status=filters.validated_data.get("status"))
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(orders, request, view=self)
        return paginator.get_paginated_response(OrderOutputSerializer(page, many=True).data)

    @extend_schema(
        operation_id="orders_create",
        request=CheckoutInputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: OrderOutputSerializer,
            200: OrderOutputSerializer,
            202: OrderOutputSerializer,
            **ERRORS(*BODY_ERRORS, 401, 403, 409, 422, 429, 503),
        },
        description="Check out the cart. 201: created; 200 with `Idempotent-Replayed: true`: "
        "this key's order, already created. 202 (a flash sale in queue mode): the order is queued "
        "(status `QUEUED`) and will be written or visibly rejected; poll the `Location`. The body is "
        "optional: without `shipping_address`, the saved default address is used (422 "
        "`shipping_address_required` when there is none).",
    )
    def create(self, request):
        key = idempotency_key_from(request)
        address = None
        if request.body:  # most checkouts send none: the saved address (and no serializer built)
            given = CheckoutInputSerializer(data=request.data)
            given.is_valid(raise_exception=True)
            address = given.validated_data.get("shipping_address")
        result = place_order(
            customer_id=request.user.id,
            idempotency_key=key,
            rate_limited=True,
            shipping_address=address,
            client_address=client_address(request),
            account_created_at=request.user.date_joined,
        )
        body = OrderOutputSerializer(result.order).data
        headers = {"Idempotent-Replayed": "true"} if result.replayed else {}
        if result.order.status == QUEUED:
            headers["Location"] = reverse("order-detail", kwargs={"order_id": result.order.id})
            return Response(body, status=202, headers=headers)
        return Response(body, status=200 if result.replayed else 201, headers=headers)


class OrderDetailApi(APIView):
    @extend_schema(responses={200: OrderOutputSerializer, **ERRORS(401, 404, 503)})
    def get(self, request, order_id: int):
        order = get_customer_order(customer_id=request.user.id, order_id=order_id)
        return Response(OrderOutputSerializer(order).data)


class OrderCancelApi(APIView):
    @extend_schema(request=None, responses={200: OrderOutputSerializer, **ERRORS(401, 404, 409, 503)})
    def post(self, request, order_id: int):
        order = cancel_customer_order(customer_id=request.user.id, order_id=order_id)
        return Response(OrderOutputSerializer(order).data)


class PaymentSessionOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "PaymentSession"

    session_id = serializers.CharField(source="provider_session_id", help_text="The provider's session")
    pay_url = serializers.URLField(help_text="Where the shopper pays (the provider's page)")
    amount = serializers.IntegerField(help_text="Minor units of `currency`: the order's total")
    currency = serializers.CharField()
    expires_at = serializers.DateTimeField(help_text="No later than the order's payment deadline")


class OrderPaymentApi(APIView):
    @extend_schema(
        request=None,
        responses={
            201: PaymentSessionOutputSerializer,
            200: PaymentSessionOutputSerializer,
            **ERRORS(401, 404, 409, 503),
        },
        description="Pay for an order awaiting payment: 201 with a new payment session (open `pay_url`); "
        "200 with the same open session for a repeated call (no second session, no second charge). "
        "409 `order_not_payable` for an order paid, cancelled, past its deadline or queued and not written "
        "yet; 503 `payment_provider_unavailable` (retry).",
    )
    def post(self, request, order_id: int):
        session, created = start_payment(customer_id=request.user.id, order_id=order_id)
        return Response(PaymentSessionOutputSerializer(session).data, status=201 if created else 200)
