from django.urls import path

from shop.account_apis import (
    AuthEmailApi,
    AuthEmailVerifyApi,
    AuthEmailVerifyResendApi,
    AuthPasswordResetApi,
    AuthPasswordResetConfirmApi,
)
from shop.apis import AuthAddressApi, AuthLogoutApi, AuthPasswordApi, AuthRegisterApi, AuthTokenApi

urlpatterns = [
    path("auth/register", AuthRegisterApi.as_view(), name="auth-register"),
    path("auth/token", AuthTokenApi.as_view(), name="auth-token"),
    path("auth/logout", AuthLogoutApi.as_view(), name="auth-logout"),
    path("auth/password", AuthPasswordApi.as_view(), name="auth-password"),
    path("auth/me/address", AuthAddressApi.as_view(), name="auth-address"),
    path("auth/me/email", AuthEmailApi.as_view(), name="auth-email"),
    path("auth/password-reset", AuthPasswordResetApi.as_view(), name="auth-password-reset"),
    path("auth/password-reset/confirm", AuthPasswordResetConfirmApi.as_view(), name="auth-password-reset-confirm"),
    path("auth/verify-email", AuthEmailVerifyApi.as_view(), name="auth-verify-email"),
    path("auth/verify-email/resend", AuthEmailVerifyResendApi.as_view(), name="auth-verify-email-resend"),
]
