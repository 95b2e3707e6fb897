"""The shopper's account as a whole: their personal data exported, and the
account erased. Both span every app below (orders, payments, shipments, carts,
the outbox), so they live here, in the top domain app, and not in shop's
accounts API (shop/apis.py), which orders builds on."""

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.openapi import BODY_ERRORS, ERRORS
from core.ratelimit import AuthThrottle
from orders.apis import OrderOutputSerializer
from orders.exports_personal import personal_data
from orders.return_apis import ReturnOutputSerializer
from orders.services.erasure import erase_own_account
from shop.apis import AddressSerializer, AuthMeApi


class PersonalDataSerializer(serializers.Serializer):
    class Meta:
        ref_name = "PersonalData"

    class AccountSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PersonalDataAccount"

        id = serializers.IntegerField(source="user.id")
        username = serializers.CharField(source="user.username")
        email = serializers.CharField(source="user.email", allow_blank=True)
        first_name = serializers.CharField(source="user.first_name", allow_blank=True)
        last_name = serializers.CharField(source="user.last_name", allow_blank=True)
        date_joined = serializers.DateTimeField(source="user.date_joined")
        last_login = serializers.DateTimeField(source="user.last_login", allow_null=True)
        email_verified = serializers.BooleanField(help_text="The e-mail address is the one whose link was followed")
        verified_email = serializers.CharField(
            source="account.verified_email", default="", allow_blank=True, help_text="The address last verified"
        )
        email_verified_at = serializers.DateTimeField(source="account.email_verified_at", default=None, allow_null=True)
        pending_email = serializers.CharField(
            source="account.pending_email",
            default="",
            allow_blank=True,
            help_text="A new address asked for, not verified yet",
        )

    class OrderSerializer(OrderOutputSerializer):
        class Meta:
            ref_name = "PersonalDataOrder"

        class PaymentSerializer(serializers.Serializer):
            class Meta:
                ref_name = "PersonalDataPayment"

            payment_id = serializers.CharField(source="provider_payment_id", help_text="The payment provider's id")
            amount = serializers.IntegerField(help_text="Minor units authorized")
            captured_amount = serializers.IntegerField(help_text="Minor units taken")
            refunded_amount = serializers.IntegerField(help_text="Minor units given back so far")
            currency = serializers.CharField()
            status = serializers.CharField()
            outcome = serializers.CharField(help_text="applied (paid the order), refunded, voided, failed or lapsed")
            received_at = serializers.DateTimeField()
            authorized_at = serializers.DateTimeField(allow_null=True)
            captured_at = serializers.DateTimeField(allow_null=True)
            voided_at = serializers.DateTimeField(allow_null=True)

        payments = PaymentSerializer(many=True, help_text="Every payment the provider told of for the order")
        returns = ReturnOutputSerializer(many=True)

    class NotificationSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PersonalDataNotification"

        order_id = serializers.IntegerField()
        kind = serializers.CharField()
        to = serializers.CharField(help_text="The address it was sent to")
        subject = serializers.CharField()
        sent_at = serializers.DateTimeField()

    class LoyaltyEntrySerializer(serializers.Serializer):
        class Meta:
            ref_name = "PersonalDataLoyaltyEntry"

        order_id = serializers.IntegerField()
        points = serializers.IntegerField(help_text="Earned (positive) or taken back (negative)")
        reason = serializers.CharField()
        created_at = serializers.DateTimeField()

    exported_at = serializers.DateTimeField()
    account = AccountSerializer(source="*")
    address = AddressSerializer(allow_null=True, help_text="The saved default shipping address")
    orders = OrderSerializer(many=True, help_text="Oldest first, with their items, payments, refunds and returns")
    notifications = NotificationSerializer(many=True, help_text="The e-mails sent about the orders, oldest first")
    loyalty_balance = serializers.IntegerField(help_text="Points: the sum of the entries")
    loyalty_entries = LoyaltyEntrySerializer(many=True)


class AuthMeExportApi(APIView):
    @extend_schema(
        responses={200: PersonalDataSerializer, **ERRORS(401, 503)},
        description="Everything the shop keeps about the shopper, as JSON (GDPR articles 15 and 20): the "
        "account, the saved address, every order with its items, payments (amounts, statuses, dates), refunds "
        "and returns, the e-mails sent, and the loyalty points.",
    )
    def get(self, request):
        return Response(PersonalDataSerializer(personal_data(user=request.user)).data)


class BodyOnDeleteSchema(AutoSchema):
    """drf-spectacular documents a body for POST, PUT and PATCH only; the erasure's
    DELETE takes one (the password), and a generated client must send it."""

    def _get_request_body(self, direction="request"):
        if self.method != "DELETE":
            return super()._get_request_body(direction)
        self.method = "POST"
        try:
            return super()._get_request_body(direction)
        finally:
            self.method = "DELETE"


# GET /api/auth/me is shop's view, inherited; DELETE erases the account. (No docstring:
# the schema would show it as the GET's description.)
class AuthMeEraseApi(AuthMeApi):
    schema = BodyOnDeleteSchema()

    class EraseInputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "AccountErasure"

        password = serializers.CharField(max_length=128, trim_whitespace=False)

    def get_throttles(self):
        # Per address, as logins and password changes: a stolen token cannot guess the password fast.
        return [AuthThrottle()] if self.request.method == "DELETE" else super().get_throttles()

    @extend_schema(
        request=EraseInputSerializer,
        responses={204: None, **ERRORS(*BODY_ERRORS, 401, 409, 429, 503)},
        description="Erase the account (GDPR article 17), the password required: the login disabled and every "
        "token revoked at once; the name, e-mail, saved address, cart, and the addresses on orders, shipments and "
        "e-mails sent replaced by placeholders. Orders, payments, refunds and returns stay (amounts, SKUs, dates), "
        "anonymous. 400 `wrong_password`; 409 `account_has_open_orders` `{orders, returns}` while an order awaits "
        "payment or shipment or a return is open; 409 `account_is_staff`.",
    )
    def delete(self, request):
        data = self.EraseInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        erase_own_account(user=request.user, password=data.validated_data["password"])
        return Response(status=204)
