from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import StrictIntegerField
from core.openapi import BODY_ERRORS, ERRORS
from orders.provider_stripe import charge_refunds, verified_stripe_event
from orders.services import handle_payment_webhook
from orders.services.refunds import handle_refund_webhook
from orders.services.stripe_events import apply_stripe_event
from orders.signatures import verify_signature


class ProviderNotificationSerializer(serializers.Serializer):
    """The fields every notification from the payment provider carries."""

    payment_id = serializers.RegexField(r"^[\x21-\x7e]{1,100}$")
    amount = StrictIntegerField(min_value=0, max_value=10**15)
    currency = serializers.RegexField(r"^[A-Z]{3}$")
    status = serializers.ChoiceField(
        choices=["authorized", "captured", "succeeded", "failed"],
        help_text="authorized (money held), captured (taken), succeeded (authorized and captured at once) or failed",
    )

    def fields_for_service(self) -> dict:
        return {name: value for name, value in self.validated_data.items() if name != "type"}


class PaymentNotificationSerializer(ProviderNotificationSerializer):
    class Meta:
        ref_name = "PaymentNotification"

    type = serializers.ChoiceField(choices=["payment"], required=False)
    order_id = StrictIntegerField(min_value=1)


class RefundNotificationSerializer(ProviderNotificationSerializer):
    class Meta:
        ref_name = "RefundNotification"

    type = serializers.ChoiceField(choices=["refund"])
    refund_id = StrictIntegerField(min_value=1)
    status = serializers.ChoiceField(choices=["succeeded", "failed"])


class RefundReceiptSerializer(serializers.Serializer):
    class Meta:
        ref_name = "RefundReceipt"

    refund_id = serializers.IntegerField(allow_null=True, source="refund.id")
    outcome = serializers.ChoiceField(
        choices=["completed", "failed", "amount_mismatch", "redelivered", "unknown_refund"]
    )


class PaymentWebhookApi(APIView):
    """The payment provider's callback: a payment (no `type`, or `"type": "payment"`)
    or a refund's outcome (`"type": "refund"`). The signature is the authentication."""

    authentication_classes = []
    permission_classes = [AllowAny]

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PaymentReceipt"

        payment_id = serializers.CharField(source="payment.provider_payment_id")
        outcome = serializers.CharField(source="payment.outcome")
        redelivered = serializers.BooleanField()

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="ProviderNotification",
            serializers=[PaymentNotificationSerializer, RefundNotificationSerializer],
            resource_type_field_name=None,
        ),
        responses={
            200: PolymorphicProxySerializer(
                component_name="ProviderReceipt",
                serializers=[OutputSerializer, RefundReceiptSerializer],
                resource_type_field_name=None,
            ),
            **ERRORS(*BODY_ERRORS, 401, 503),
        },
        parameters=[
            OpenApiParameter(
                "Payment-Signature",
                str,
                OpenApiParameter.HEADER,
                required=True,
                description='t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">',
            )
        ],
    )
    def post(self, request):
        verify_signature(
            header=request.headers.get("Payment-Signature"),
            body=request.body,
            secret=settings.PAYMENT_WEBHOOK_SECRET,
        )
        if isinstance(request.data, dict) and request.data.get("type") == "refund":
            refund = RefundNotificationSerializer(data=request.data)
            refund.is_valid(raise_exception=True)
            return Response(RefundReceiptSerializer(handle_refund_webhook(**refund.fields_for_service())).data)
        payment = PaymentNotificationSerializer(data=request.data)
        payment.is_valid(raise_exception=True)
        result = handle_payment_webhook(**payment.fields_for_service(), raw_body=request.body.decode())
        return Response(self.OutputSerializer(result).data)


class StripeEventSerializer(serializers.Serializer):
    """What the shop reads of a Stripe event (docs only: the body is read raw, as signed)."""

    class Meta:
        ref_name = "StripeEvent"

    id = serializers.CharField(help_text="evt_...")
    type = serializers.CharField(help_text="e.g. payment_intent.succeeded; types the shop does not use are ignored")
    data = serializers.JSONField(help_text='{"object": the PaymentIntent, Checkout Session, Charge or Refund}')


class StripeWebhookApi(APIView):
    """Stripe's events (PAYMENT_PROVIDER=stripe): the `Stripe-Signature` header
    checked by Stripe's own verifier (STRIPE_WEBHOOK_SECRET, 300 s of tolerance),
    then the event applied (orders/services/stripe_events.py). Any event type the
    shop does not use is answered 200 and ignored, so Stripe stops sending it."""

    authentication_classes = []
    permission_classes = [AllowAny]

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "StripeReceipt"

        received = serializers.BooleanField()
        outcome = serializers.CharField(help_text="What the event did: applied, redelivered, lapsed, ignored, ...")

    @extend_schema(
        request=StripeEventSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 401, 413, 503)},
        parameters=[
            OpenApiParameter(
                "Stripe-Signature",
                str,
                OpenApiParameter.HEADER,
                required=True,
                description='t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>"> (Stripe\'s scheme)',
            )
        ],
    )
    def post(self, request):
        body = request.body
        event = verified_stripe_event(body=body, header=request.headers.get("Stripe-Signature"))
        outcome = apply_stripe_event(event, raw_body=body.decode(), list_refunds=charge_refunds)
        return Response({"received": True, "outcome": outcome})
