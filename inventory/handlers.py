"""The warehouse consumer: a shipment request per paid order (dropped if the
order is cancelled before it leaves), and the stock
managers told when an order leaves a SKU running low (never inside checkout)."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.utils import timezone

from core.db import insert_unless_exists
from inventory.models import LowStockAlert, Shipment, Stock
from outbox.consumers import Event, register

STOCK_MANAGERS = "Stock managers"


@register("warehouse", "OrderPaid")
def request_shipment(event: Event) -> None:
    data = event.data
    Shipment.objects.get_or_create(
        order_id=data["order_id"], defaults={"items": data["items"], "shipping_address": data.get("shipping_address")}
    )


@register("warehouse", "OrderCancelled")
def cancel_shipment(event: Event) -> None:
    """A paid order cancelled before it left: its shipment request is dropped
    (a shipment already made stays: the order could not have been cancelled)."""
    Shipment.objects.filter(order_id=event.data["order_id"], status=Shipment.Status.REQUESTED).update(
        status=Shipment.Status.CANCELLED
    )


@register("warehouse", "OrderLinesCancelled")
def shorten_shipment(event: Event) -> None:
    """Staff removed lines before the order left: the request now asks for what is
    left (`items` in the event: the whole list, so a redelivery changes nothing)."""
    Shipment.objects.filter(order_id=event.data["order_id"], status=Shipment.Status.REQUESTED).update(
        items=event.data["items"]
    )


@register("warehouse", "OrderCreated")
def alert_low_stock(event: Event) -> None:
    skus = sorted({item["sku"] for item in event.data["items"]})
    low = (
        Stock.objects.filter(product_id__in=skus)
        .low()
        .order_by("product_id")
        .values_list("product_id", "available", "threshold")
    )
    today = timezone.localdate()
    for sku, available, threshold in low:
        alert = LowStockAlert(product_id=sku, day=today, available=available, threshold=threshold)
        if insert_unless_exists(alert, conflict_fields=["product", "day"]) is None:
            continue  # told today already
        managers = get_user_model().objects.filter(groups__name=STOCK_MANAGERS, is_active=True).exclude(email="")
        send_mail(
            f"Low stock: {sku} ({available} left)",
            f"{sku} has {available} units available, below its threshold of {threshold}.\n"
            "Receive stock in the admin: Inventory > Stock.\n",
            settings.DEFAULT_FROM_EMAIL,
            sorted(managers.values_list("email", flat=True)),
        )
