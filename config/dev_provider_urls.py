"""The payment-provider simulator's routes, served under /dev/payment-provider/ while DEBUG is on."""

from django.urls import path

from config import dev_provider

urlpatterns = [
    path("refunds", dev_provider.refunds, name="dev-refunds"),
]
