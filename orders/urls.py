from django.urls import path

from orders.account_apis import AuthMeEraseApi, AuthMeExportApi
from orders.apis import OrderCancelApi, OrderDetailApi, OrderPaymentApi, OrdersApi
from orders.payment_apis import PaymentWebhookApi, StripeWebhookApi
from orders.return_apis import OrderReturnsApi

urlpatterns = [
    path("orders", OrdersApi.as_view({"get": "list", "post": "create"}), name="orders"),
    path("orders/<int:order_id>", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<int:order_id>/cancel", OrderCancelApi.as_view(), name="order-cancel"),
    path("orders/<int:order_id>/payment", OrderPaymentApi.as_view(), name="order-payment"),
    path("orders/<int:order_id>/returns", OrderReturnsApi.as_view(), name="order-returns"),
    path("payments/webhook", PaymentWebhookApi.as_view(), name="payment-webhook"),
    path("payments/stripe/webhook", StripeWebhookApi.as_view(), name="stripe-webhook"),
    # GET is shop's own view (shop.apis.AuthMeApi), inherited; DELETE erases the account, which
    # reaches every app's data: so the route lives here, above them all.
    path("auth/me", AuthMeEraseApi.as_view(), name="auth-me"),
    path("auth/me/export", AuthMeExportApi.as_view(), name="auth-me-export"),
]
