"""The payment-provider simulator's routes, served under /dev/payment-provider/ while DEBUG is on."""

from django.urls import path

from config import dev_provider

urlpatterns = [
    path("sessions", dev_provider.sessions, name="dev-sessions"),
    path("captures", dev_provider.captures, name="dev-captures"),
    path("voids", dev_provider.voids, name="dev-voids"),
    path("refunds", dev_provider.refunds, name="dev-refunds"),
    path("pay/<str:session_id>", dev_provider.pay, name="dev-pay"),
]
