"""The account API: password reset, e-mail verification, e-mail change
(shop/accounts.py; the reset itself is shop.services.reset_password)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.authentication import TokenAuthentication
from core.openapi import BODY_ERRORS, ERRORS
from core.ratelimit import AuthThrottle, client_address
from core.requestid import current_request_id, request_id_var
from shop.accounts import change_email, request_password_reset, resend_verification, send_account_mails, verify_email
from shop.services import reset_password

RESET_ASKED = "If an account uses this address, a link to reset its password is on its way to it."


class MailedAfterResponse(Response):
    """An answer whose e-mails leave once it has gone out: the WSGI server calls
    close() after sending the last byte (Django's test client too), so the
    answer and its time are the same whether there is anything to send or not."""

    def __init__(self, *args, mails, **kwargs):
        super().__init__(*args, **kwargs)
        self.mails, self.request_id = mails, current_request_id()

    def close(self):
        super().close()
        token = request_id_var.set(self.request_id)  # the log lines keep the request's id
        try:
            send_account_mails(self.mails)
        finally:
            request_id_var.reset(token)


class AuthPasswordResetApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PasswordReset"

        email = serializers.EmailField(max_length=254)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PasswordResetAsked"

        message = serializers.CharField()

    @extend_schema(
        request=InputSerializer,
        responses={202: OutputSerializer, **ERRORS(*BODY_ERRORS, 429, 503)},
        description="Ask for a password-reset link. The answer is the same, in the same time, whether or "
        "not an account has the address: each active account with it is sent a link "
        "`{SHOP_PUBLIC_URL}/reset-password?uid=…&token=…`, good once, for PASSWORD_RESET_TIMEOUT seconds. "
        "Limited per address asked for (RATE_LIMIT_PASSWORD_RESET) and per client address "
        "(RATE_LIMIT_PASSWORD_RESET_ADDRESS).",
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        mails = request_password_reset(email=data.validated_data["email"], client_address=client_address(request))
        return MailedAfterResponse({"message": RESET_ASKED}, status=202, mails=mails)


class AuthPasswordResetConfirmApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []
    throttle_classes = [AuthThrottle]  # per address, as logins

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "PasswordResetConfirm"

        uid = serializers.CharField(max_length=64)
        token = serializers.CharField(max_length=64)
        new_password = serializers.CharField(max_length=128, trim_whitespace=False)

    @extend_schema(
        request=InputSerializer,
        responses={204: None, **ERRORS(*BODY_ERRORS, 429, 503)},
        description="Set a new password with the `uid` and `token` of a reset link: every API token of the "
        "account is revoked, and the link is dead. 400 `invalid_token` for a bad, used or expired link; "
        "400 `invalid` on `new_password` when Django's password validators refuse it (the link still works).",
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reset_password(**data.validated_data)
        return Response(status=204)


class AuthEmailVerifyApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []
    throttle_classes = [AuthThrottle]

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "EmailVerification"

        uid = serializers.CharField(max_length=64)
        token = serializers.CharField(max_length=64)

    @extend_schema(
        request=InputSerializer,
        responses={204: None, **ERRORS(*BODY_ERRORS, 429, 503)},
        description="Follow an e-mail verification link (`uid`, `token`): its address is verified; a pending "
        "new address becomes the account's e-mail. 400 `invalid_token` for a bad, used or expired link, or "
        "one for an address the account no longer has.",
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        verify_email(**data.validated_data)
        return Response(status=204)


class AuthEmailVerifyResendApi(APIView):
    authentication_classes = [TokenAuthentication]

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "VerificationSent"

        sent_to = serializers.EmailField(help_text="The pending address if there is one, else the account's e-mail")

    @extend_schema(
        request=None,
        responses={202: OutputSerializer, **ERRORS(401, 409, 429, 503)},
        description="Mail a new verification link (RATE_LIMIT_VERIFY_EMAIL per account). 409 "
        "`nothing_to_verify` when the e-mail is verified already and none is pending, or there is none.",
    )
    def post(self, request):
        return Response({"sent_to": resend_verification(user=request.user)}, status=202)


class AuthEmailApi(APIView):
    authentication_classes = [TokenAuthentication]
    throttle_classes = [AuthThrottle]  # per address, as the password change: the password is checked

    class InputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "EmailChange"

        email = serializers.EmailField(max_length=254)
        password = serializers.CharField(max_length=128, trim_whitespace=False)

    class OutputSerializer(serializers.Serializer):
        class Meta:
            ref_name = "EmailChangeAsked"

        email = serializers.CharField(help_text="The account's e-mail: unchanged until the new one is verified")
        pending_email = serializers.CharField(help_text="The new address, waiting for its link to be followed")

    @extend_schema(
        request=InputSerializer,
        responses={202: OutputSerializer, **ERRORS(*BODY_ERRORS, 401, 429, 503)},
        description="Change the e-mail (the current password required: 400 `wrong_password`): a verification "
        "link goes to the new address, which replaces the old one once it is followed. Asking for the "
        "current address drops a pending change. Counts against RATE_LIMIT_VERIFY_EMAIL.",
    )
    def put(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        state = change_email(user=request.user, **data.validated_data)
        return Response(self.OutputSerializer(state).data, status=202)
