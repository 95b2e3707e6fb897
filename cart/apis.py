import json
import re
from dataclasses import asdict

from django.conf import settings
from django.http import HttpResponse
from django_countries import countries
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from cart.services import (
    get_cart,
    get_guest_cart,
    remove_cart_item,
    remove_guest_cart_item,
    remove_shipping_method,
    remove_voucher,
    set_cart_item,
    set_guest_cart_item,
    set_shipping_method,
    set_voucher,
    shipping_quotes,
)
from core.authentication import CachedTokenAuthentication, remembered_user
from core.exceptions import api_exception_handler
from core.fields import StrictIntegerField
from core.hotcache import HotCacheApiView, StaleCache
from core.openapi import BODY_ERRORS, ERRORS
from core.ratelimit import client_address
from shop.apis import DiscountSerializer
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
        discount = serializers.IntegerField(help_text="Minor units taken off the whole line by the promotions")
        line_total = serializers.IntegerField(
            help_text="`quantity` x `unit_price` - `discount`, in the catalog's terms (tax included or not)"
        )
        tax_rate = serializers.IntegerField(help_text="Basis points (2000: 20%) of the line's tax class where it ships")
        net = serializers.IntegerField(help_text="The line without tax")
        tax = serializers.IntegerField(help_text="The line's tax, rounded half up")
        gross = serializers.IntegerField(help_text="`net` + `tax`")
        in_stock = serializers.BooleanField(help_text="A hint: checkout decides")

    class WarningSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CartWarning"

        sku = serializers.CharField(allow_null=True, help_text="null: about the cart (its shipping method)")
        code = serializers.CharField(
            help_text="`unknown_sku`, `inactive_sku` or `shipping_method_unavailable` (it takes no part)"
        )
        message = serializers.CharField()

    class VoucherSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CartVoucher"

        class ErrorSerializer(serializers.Serializer):
            class Meta:
                ref_name = "CartVoucherError"

            code = serializers.CharField(
                help_text="`voucher_unknown`, `voucher_expired`, `voucher_not_started` or `voucher_not_applicable`"
            )
            message = serializers.CharField()

        code = serializers.CharField(help_text="As stored: upper-case")
        error = ErrorSerializer(
            allow_null=True,
            help_text="Why checkout would refuse the voucher now (it then takes nothing off): null while it "
            "applies. A voucher used up by other orders meanwhile is found at checkout (422 `voucher_used_up`).",
        )

    class TaxLineSerializer(serializers.Serializer):
        class Meta:
            ref_name = "TaxLine"

        rate = serializers.IntegerField(help_text="Basis points")
        base = serializers.IntegerField(help_text="The net taxed at this rate")
        amount = serializers.IntegerField(help_text="The tax at this rate")

    class ShippingSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ShippingCharge"

        code = serializers.CharField()
        name = serializers.CharField()
        country = serializers.CharField(required=False, help_text="Where it ships to")
        price = serializers.IntegerField(help_text="The method's price for these goods, before its discount")
        discount = serializers.IntegerField(help_text="Taken off by a free-shipping promotion or voucher")
        net = serializers.IntegerField()
        tax = serializers.IntegerField(help_text="At the rates of the goods it carries, in proportion")
        gross = serializers.IntegerField()
        taxes = serializers.ListField(child=serializers.DictField(), help_text="Its parts per rate: rate, base, amount")

    items = LineSerializer(many=True)
    voucher = VoucherSerializer(allow_null=True, help_text="The code entered (`PUT /api/cart/voucher`), or null")
    subtotal = serializers.IntegerField(help_text="The lines at catalog prices")
    discounts = DiscountSerializer(many=True, help_text="The promotions applied, each with what it takes off")
    shipping = ShippingSerializer(
        allow_null=True, help_text="The chosen method (`PUT /api/cart/shipping-method`) priced for the cart, or null"
    )
    needs_shipping = serializers.BooleanField(help_text="Some goods weigh something: checkout needs a method")
    country = serializers.CharField(help_text="Whose tax rates price the cart: where it ships, else the shop's")
    prices_include_tax = serializers.BooleanField(help_text="Catalog prices include tax (extracted) or not (added)")
    tax = serializers.IntegerField(help_text="The lines' tax + shipping's tax")
    tax_lines = TaxLineSerializer(many=True, help_text="Per rate, highest first")
    total = serializers.IntegerField(
        help_text="The lines' `gross` + shipping's `gross`: what checkout charges; also the tax lines' bases + `tax`"
    )
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
                "discount": line.discount,
                "line_total": line.line_total,
                "tax_rate": line.tax_rate,
                "net": line.net,
                "tax": line.tax,
                "gross": line.gross,
                "in_stock": line.in_stock,
            }
            for line in cart.items
        ],
        "voucher": cart.voucher,
        "subtotal": cart.subtotal,
        "discounts": cart.discounts,
        "shipping": cart.shipping,
        "needs_shipping": cart.needs_shipping,
        "country": cart.country,
        "prices_include_tax": cart.prices_include_tax,
        "tax": cart.tax,
        "tax_lines": cart.tax_lines,
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


_PLAIN_QUANTITY = re.compile(rb'\{"quantity": ?(0|[1-9][0-9]{0,8})\}')


def plain_quantity(request) -> int | None:
    """The quantity of a JSON body that is exactly {"quantity": n}, n a JSON integer in
    0..CART_MAX_QUANTITY; None for anything else (DRF's path then parses it and answers).
    The body as clients send it ({"quantity":3} or {"quantity": 3}) is matched without
    a JSON parser; any other spelling of the same object is parsed."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if request.content_type != "application/json" or not length.isdigit() or int(length) > 64:
        return None  # '{"quantity": 99}' is 16 bytes; anything else is DRF's to read, bound and refuse
    body = request.body
    if plain := _PLAIN_QUANTITY.fullmatch(body):
        quantity = int(plain[1])
    else:
        try:
            data = json.loads(body.decode())
        except ValueError:
            return None
        if not isinstance(data, dict) or data.keys() != {"quantity"}:
            return None
        quantity = data["quantity"]
    return quantity if type(quantity) is int and 0 <= quantity <= settings.CART_MAX_QUANTITY else None


CART_TOKEN = OpenApiParameter(
    "Cart-Token",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="A guest's cart, without `Authorization`: the token the first `PUT /api/cart/items/{sku}` "
    "answered in its `Cart-Token` header (a login or register with it merges the cart into the shopper's). "
    "Ignored when a shopper's token is sent.",
)
NEW_CART_TOKEN = OpenApiParameter(
    "Cart-Token",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    response=[200],
    description="A new guest cart's token (its first write only)",
)


def guest_token(request, *, required: bool = True) -> str | None:
    """The guest's Cart-Token (NotAuthenticated without it, when `required`)."""
    token = request.headers.get("Cart-Token")
    if token is None and required:
        raise NotAuthenticated("Send a shopper's token (Authorization) or a guest's Cart-Token.")
    return token


class CartView(HotCacheApiView):
    def past_drf(self, request, user, work) -> HttpResponse | None:
        """`work()` (a cart service call) for a shopper this process knows, answered
        without DRF's Request, initial() and exception handling, which were a fifth
        of a warm cart request's CPU (bench/cart.py): None to take DRF's path, when the
        caches changed (nothing was written: the script checks the generation first,
        and DRF's path retries from the database). Any other refusal is answered here,
        by the API's own exception handler: a write is never tried twice."""
        try:
            cart = work()
        except StaleCache:
            return None
        except Exception as exc:  # noqa: BLE001 - the exception handler answers every one, a 500 logged
            refused = api_exception_handler(exc, {"view": self, "request": request})
            headers = {name: value for name, value in refused.items() if name.lower() != "content-type"}
            body, status = self._json.render(refused.data), refused.status_code
            response = HttpResponse(body, status=status, content_type="application/json", headers=headers)
        else:
            response = self.rendered_cart(cart)
        response["Allow"] = self.allow_header()  # all DRF's finalize_response adds here (one renderer: no Vary)
        return response

    def allow_header(self) -> str:
        """DRF's `Allow` header (default_response_headers), worked out once per view class."""
        view = type(self)
        allow = view.__dict__.get("_allow")
        if allow is None:
            allow = view._allow = ", ".join(self.allowed_methods)
        return allow

    def rendered_cart(self, cart, *, headers=None) -> HttpResponse:
        """The cart's JSON (CartOutputSerializer's), rendered once per priced cart: a cart
        served again as it was priced (cart/services.py _price) is served as it was rendered."""
        body = cart.rendered.get("json")
        if body is None:
            body = cart.rendered["json"] = self._json.render(cart_json(cart))
        return HttpResponse(body, content_type="application/json", headers=headers)


class CartApi(CartView):
    """A shopper's cart (`Authorization`), or a guest's (`Cart-Token`)."""

    authentication_classes = [CachedTokenAuthentication]
    permission_classes = [AllowAny]  # a guest is identified by the Cart-Token instead

    def dispatch(self, request, *args, **kwargs):
        # A shopper this process knows reads their cart past DRF (CartView.past_drf): nothing
        # to parse, no throttle, and the read script checks the cache generation.
        if request.method == "GET" and (user := remembered_user(request.META.get("HTTP_AUTHORIZATION", ""))):
            if answer := self.past_drf(request, user, lambda: get_cart(customer_id=user.id)):
                return answer
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(parameters=[CART_TOKEN], responses={200: CartOutputSerializer, **ERRORS(401, 404, 503)})
    def get(self, request):
        if request.user.is_authenticated:
            return self.rendered_cart(get_cart(customer_id=request.user.id))
        return self.rendered_cart(get_guest_cart(token=guest_token(request)))


class CartItemApi(CartView):
    authentication_classes = [CachedTokenAuthentication]
    permission_classes = [AllowAny]  # a guest: the Cart-Token, or none to start a cart
    throttle_classes = []  # the write script itself counts the shopper's rate limit (cart/storage.py)

    class InputSerializer(serializers.Serializer):  # the documented body; see validated_quantity
        class Meta:
            ref_name = "CartItemQuantity"

        quantity = StrictIntegerField(min_value=0, max_value=settings.CART_MAX_QUANTITY)

    def dispatch(self, request, *args, **kwargs):
        # A shopper this process knows, sending exactly {"quantity": n} as JSON, writes past DRF
        # (CartView.past_drf); any other body takes DRF's path, which parses and refuses it.
        if request.method == "PUT" and (user := remembered_user(request.META.get("HTTP_AUTHORIZATION", ""))):
            quantity, sku = plain_quantity(request), kwargs["sku"]
            work = lambda: set_cart_item(customer_id=user.id, sku=sku, quantity=quantity)  # noqa: E731
            if quantity is not None and (answer := self.past_drf(request, user, work)):
                return answer
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer,
        parameters=[SKU, CART_TOKEN, NEW_CART_TOKEN],
        responses={200: CartOutputSerializer, **ERRORS(*BODY_ERRORS, 401, 404, 409, 422, 429, 503)},
        description="Set the absolute quantity of one line (idempotent); 0 removes it. Without "
        "`Authorization` nor `Cart-Token`, a guest cart is started: its token comes back in the "
        "`Cart-Token` header.",
    )
    def put(self, request, sku: str):
        quantity = validated_quantity(request.data)
        if request.user.is_authenticated:
            return self.rendered_cart(set_cart_item(customer_id=request.user.id, sku=sku, quantity=quantity))
        given = guest_token(request, required=False)
        cart, token = set_guest_cart_item(token=given, sku=sku, quantity=quantity, address=client_address(request))
        return self.rendered_cart(cart, headers={} if given else {"Cart-Token": token})

    @extend_schema(parameters=[SKU, CART_TOKEN], responses={204: None, **ERRORS(401, 404, 429, 503)})
    def delete(self, request, sku: str):
        if request.user.is_authenticated:
            remove_cart_item(customer_id=request.user.id, sku=sku)
        else:
            remove_guest_cart_item(token=guest_token(request), sku=sku, address=client_address(request))
        return Response(status=204)


class CartVoucherApi(CartView):
    """The cart's voucher: one code at a time (a new one replaces it)."""

    authentication_classes = [CachedTokenAuthentication]
    permission_classes = [AllowAny]  # a guest: the Cart-Token
    throttle_classes = []  # the attempts are counted per shopper (or guest cart) and per address (cart/services.py)

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CartVoucherCode"

        code = serializers.CharField(max_length=64, help_text="Case-insensitive: letters, digits, dashes, <= 32")

    @extend_schema(
        request=InputSerializer,
        parameters=[CART_TOKEN],
        responses={200: CartOutputSerializer, **ERRORS(*BODY_ERRORS, 401, 404, 422, 429, 503)},
        description="Enter a voucher code: the cart, priced with it. 422 with `voucher_unknown`, "
        "`voucher_expired`, `voucher_not_started`, `voucher_used_up` or `voucher_not_applicable` when it "
        "cannot be used, and the cart keeps what it had. Attempts are limited per shopper (or guest cart) "
        "and per client address (429), so codes cannot be guessed.",
    )
    def put(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        code, address = serializer.validated_data["code"], client_address(request)
        if request.user.is_authenticated:
            return self.rendered_cart(set_voucher(code=code, address=address, customer_id=request.user.id))
        return self.rendered_cart(set_voucher(code=code, address=address, token=guest_token(request)))

    @extend_schema(parameters=[CART_TOKEN], responses={204: None, **ERRORS(401, 404, 503)})
    def delete(self, request):
        if request.user.is_authenticated:
            remove_voucher(customer_id=request.user.id)
        else:
            remove_voucher(token=guest_token(request))
        return Response(status=204)


class CountryField(serializers.CharField):
    """An ISO 3166-1 alpha-2 code that exists, any case (stored upper-case)."""

    def to_internal_value(self, data):
        code = super().to_internal_value(data).upper()
        if code not in countries:
            raise serializers.ValidationError("Not an ISO 3166-1 alpha-2 country code (e.g. GB, ES).")
        return code


class CartShippingApi(CartView):
    """The cart's shipping method and where it goes (one at a time: a new one replaces it)."""

    authentication_classes = [CachedTokenAuthentication]
    permission_classes = [AllowAny]  # a guest: the Cart-Token

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "CartShippingMethod"

        code = serializers.CharField(max_length=32, help_text="A method of GET /api/shipping-methods")
        country = CountryField(
            max_length=2,
            required=False,
            help_text="Where it ships to; default: the shopper's saved address's, else the shop's country",
        )

    @extend_schema(
        request=InputSerializer,
        parameters=[CART_TOKEN],
        responses={200: CartOutputSerializer, **ERRORS(*BODY_ERRORS, 401, 404, 422, 503)},
        description="Choose how the cart ships: the cart, priced with it and taxed at the country's rates. 422 "
        "`shipping_method_unknown` (no active method has the code) or `shipping_method_unavailable` (`details`: "
        "`code`, `country`: it does not ship there), and the cart keeps what it had.",
    )
    def put(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        chosen = serializer.validated_data
        if request.user.is_authenticated:
            return self.rendered_cart(set_shipping_method(**chosen, customer_id=request.user.id))
        return self.rendered_cart(set_shipping_method(**chosen, token=guest_token(request)))

    @extend_schema(parameters=[CART_TOKEN], responses={204: None, **ERRORS(401, 404, 503)})
    def delete(self, request):
        if request.user.is_authenticated:
            remove_shipping_method(customer_id=request.user.id)
        else:
            remove_shipping_method(token=guest_token(request))
        return Response(status=204)


class ShippingMethodsApi(HotCacheApiView):
    """Public: the methods that ship to a country; with a cart, each priced for it."""

    authentication_classes = [CachedTokenAuthentication]
    permission_classes = [AllowAny]

    class QuerySerializer(serializers.Serializer):
        country = CountryField(max_length=2, help_text="ISO 3166-1 alpha-2, e.g. GB")

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "ShippingMethod"

        code = serializers.CharField()
        name = serializers.CharField()
        min_days = serializers.IntegerField(help_text="Estimated delivery, in days")
        max_days = serializers.IntegerField()
        price = serializers.IntegerField(
            allow_null=True,
            help_text="For the cart sent (after free-shipping discounts, in the catalog's terms); null without one, "
            "or when the method cannot carry it",
        )
        available = serializers.BooleanField(help_text="It can carry the cart (false: too heavy for its bands)")
        currency = serializers.CharField()

    @extend_schema(
        parameters=[QuerySerializer, CART_TOKEN],
        responses={200: OutputSerializer(many=True), **ERRORS(400, 401, 404, 503)},
    )
    def get(self, request):
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        country, currency = query.validated_data["country"], settings.SHOP_CURRENCY
        if request.user.is_authenticated:
            quotes = shipping_quotes(country=country, customer_id=request.user.id)
        else:
            quotes = shipping_quotes(country=country, token=guest_token(request, required=False))
        return Response([{**asdict(quote), "currency": currency} for quote in quotes])
