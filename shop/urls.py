from django.urls import path

from shop.apis import AuthAddressApi, AuthLogoutApi, AuthMeApi, AuthPasswordApi, AuthRegisterApi, AuthTokenApi

urlpatterns = [
    path("auth/register", AuthRegisterApi.as_view(), name="auth-register"),
    path("auth/token", AuthTokenApi.as_view(), name="auth-token"),
    path("auth/me", AuthMeApi.as_view(), name="auth-me"),
    path("auth/logout", AuthLogoutApi.as_view(), name="auth-logout"),
    path("auth/password", AuthPasswordApi.as_view(), name="auth-password"),
    path("auth/me/address", AuthAddressApi.as_view(), name="auth-address"),
]
