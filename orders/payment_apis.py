from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import StrictIntegerField
from core.openapi import BODY_ERRORS, ERRORS
from orders.services import handle_payment_webhook
from orders.signatures import verify_signature


class PaymentWebhookApi(APIView):
    """The payment provider's callback. The signature is the authentication."""

    authentication_classes = []
    permission_classes = [AllowAny]

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PaymentNotification"

        payment_id = serializers.RegexField(r"^[\x21-\x7e]{1,100}$")
        order_id = StrictIntegerField(min_value=1)
        amount = StrictIntegerField(min_value=0, max_value=10**15)
        currency = serializers.RegexField(r"^[A-Z]{3}$")
        status = serializers.ChoiceField(choices=["succeeded", "failed"])

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PaymentReceipt"

        payment_id = serializers.CharField(source="payment.provider_payment_id")
        outcome = serializers.CharField(source="payment.outcome")
        redelivered = serializers.BooleanField()

    @extend_schema(
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(*BODY_ERRORS, 401, 503)},
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
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = handle_payment_webhook(**data.validated_data, raw_body=request.body.decode())
        return Response(self.OutputSerializer(result).data)
