from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.authentication import TokenAuthentication
from core.openapi import BODY_ERRORS, ERRORS
from core.ratelimit import AuthThrottle
from shop.services import issue_token, register_customer, revoke_token

User = get_user_model()


class TokenOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Token"

    token = serializers.CharField(help_text="64 hex characters; send it as `Authorization: Token <token>`")
    expiry = serializers.DateTimeField(help_text="After this the token is refused: log in again")


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
        return Response(TokenOutputSerializer(token).data, status=201)


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
        return Response(TokenOutputSerializer(token).data)


class AuthMeApi(APIView):
    class OutputSerializer(serializers.ModelSerializer):
        class Meta:
            model = User
            fields = ["id", "username", "email"]
            ref_name = "Me"

    @extend_schema(responses={200: OutputSerializer, **ERRORS(401, 503)})
    def get(self, request):
        return Response(self.OutputSerializer(request.user).data)


class AuthLogoutApi(APIView):
    authentication_classes = [TokenAuthentication]  # a token to revoke, not an admin session

    @extend_schema(request=None, responses={204: None, **ERRORS(401, 503)})
    def post(self, request):
        """Revoke the token of this request (other sessions keep theirs)."""
        revoke_token(token=request.auth)
        return Response(status=204)
