"""The warehouse consumer: a shipment request per paid order."""

from inventory.models import Shipment
from outbox.consumers import Event, register


@register("warehouse", "OrderPaid")
def request_shipment(event: Event) -> None:
    data = event.data
    Shipment.objects.get_or_create(
        order_id=data["order_id"], defaults={"items": data["items"], "shipping_address": data.get("shipping_address")}
    )
