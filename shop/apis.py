from django_countries.serializer_fields import CountryField
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.authentication import TokenAuthentication
from core.openapi import BODY_ERRORS, ERRORS
from core.ratelimit import AuthThrottle
from shop.accounts import email_state
from shop.hooks import sign_in_extras
from shop.models import PHONE_MESSAGE, PHONE_PATTERN
from shop.services import (
    change_password,
    default_address,
    issue_token,
    register_customer,
    revoke_token,
    set_default_address,
)


class TokenOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Token"

    token = serializers.CharField(help_text="64 hex characters; send it as `Authorization: Token <token>`")
    expiry = serializers.DateTimeField(help_text="After this the token is refused: log in again")
    cart_merged = serializers.IntegerField(
        required=False,
        help_text="Only with a `Cart-Token` header: the guest cart's lines merged into the shopper's cart "
        "(the larger quantity wins; the guest token is then dead)",
    )


def token_answer(request, token) -> dict:
    """The token, and what the apps above add at a sign-in (shop/hooks.py)."""
    return {**TokenOutputSerializer(token).data, **sign_in_extras(user_id=token.user_id, headers=request.headers)}


class Alpha2CountryField(CountryField):
    """ISO 3166-1 alpha-2 only (django-countries also takes alpha-3 and numeric codes)."""

    def to_internal_value(self, data):
        if not isinstance(data, str) or len(data) != 2:
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class DiscountSerializer(serializers.Serializer):
    """A promotion that took something off, as the cart, the order and its events show it."""

    class Meta:
        ref_name = "Discount"

    promotion_id = serializers.IntegerField()
    name = serializers.CharField()
    code = serializers.CharField(allow_null=True, help_text="A voucher's code; null for an automatic promotion")
    amount = serializers.IntegerField(help_text="Minor units it takes off (the sum over its lines)")


class AddressSerializer(serializers.Serializer):
    """A shipping address (the shopper's default, or one sent with a checkout)."""

    class Meta:
        ref_name = "ShippingAddress"

    name = serializers.CharField(max_length=100)
    line1 = serializers.CharField(max_length=200)
    line2 = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    city = serializers.CharField(max_length=100)
    postal_code = serializers.CharField(max_length=20)
    country = Alpha2CountryField(help_text="ISO 3166-1 alpha-2, e.g. ES")
    phone = serializers.RegexField(PHONE_PATTERN, max_length=20, error_messages={"invalid": PHONE_MESSAGE})

    def to_internal_value(self, data):
        values = super().to_internal_value(data)
        return {**values, "country": str(values["country"])}


class AuthRegisterApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []
    throttle_classes = [AuthThrottle]

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Register"

        username = serializers.RegexField(r"^[\w.@+-]+\Z", max_length=150)
        password = serializers.CharField(max_length=128, trim_whitespace=False)
        email = serializers.EmailField(required=False, default="", allow_blank=True)

    @extend_schema(
        request=InputSerializer, responses={201: TokenOutputSerializer, **ERRORS(*BODY_ERRORS, 409, 429, 503)}
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        token = register_customer(**data.validated_data)
        return Response(token_answer(request, token), status=201)


class AuthTokenApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []
    throttle_classes = [AuthThrottle]

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Login"

        username = serializers.CharField(max_length=150)
        password = serializers.CharField(max_length=128, trim_whitespace=False)

    @extend_schema(
        request=InputSerializer, responses={200: TokenOutputSerializer, **ERRORS(*BODY_ERRORS, 401, 429, 503)}
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        token = issue_token(**data.validated_data)
        return Response(token_answer(request, token))


class AuthMeApi(APIView):
    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "Me"

        id = serializers.IntegerField()
        username = serializers.CharField()
        email = serializers.CharField()
        email_verified = serializers.BooleanField(help_text="Its link was followed (and it has not changed since)")
        pending_email = serializers.CharField(help_text='A new address waiting for its link to be followed; ""')

    @extend_schema(responses={200: OutputSerializer, **ERRORS(401, 503)})
    def get(self, request):
        user, state = request.user, email_state(user=request.user)
        return Response(self.OutputSerializer({"id": user.id, "username": user.username, **vars(state)}).data)


class AuthLogoutApi(APIView):
    authentication_classes = [TokenAuthentication]  # a token to revoke, not an admin session

    @extend_schema(request=None, responses={204: None, **ERRORS(401, 503)})
    def post(self, request):
        """Revoke the token of this request (other sessions keep theirs)."""
        revoke_token(token=request.auth)
        return Response(status=204)


class AuthPasswordApi(APIView):
    authentication_classes = [TokenAuthentication]
    throttle_classes = [AuthThrottle]  # per address, as logins: a stolen token cannot guess the password fast

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PasswordChange"

        old_password = serializers.CharField(max_length=128, trim_whitespace=False)
        new_password = serializers.CharField(max_length=128, trim_whitespace=False)

    @extend_schema(request=InputSerializer, responses={204: None, **ERRORS(*BODY_ERRORS, 401, 429, 503)})
    def post(self, request):
        """Change the password (the current one required); every other token of the
        shopper is revoked at once, the one of this request keeps working."""
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        change_password(user=request.user, current_token=request.auth, **data.validated_data)
        return Response(status=204)


class AuthAddressApi(APIView):
    @extend_schema(responses={200: AddressSerializer, **ERRORS(401, 404, 503)})
    def get(self, request):
        """The shopper's default shipping address (404 until one is saved)."""
        address = default_address(customer_id=request.user.id)
        if address is None:
            raise NotFound("No default address saved yet: PUT one.")
        return Response(AddressSerializer(address).data)

    @extend_schema(request=AddressSerializer, responses={200: AddressSerializer, **ERRORS(*BODY_ERRORS, 401, 503)})
    def put(self, request):
        """Save the default shipping address (checkouts without a body use it)."""
        data = AddressSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        saved = set_default_address(customer_id=request.user.id, address=data.validated_data)
        return Response(AddressSerializer(saved).data)
