"""The warehouse consumer: a shipment request per paid order."""

from inventory.models import Shipment
from outbox.consumers import Event, register


@register("warehouse", "OrderPaid")
def request_shipment(event: Event) -> None:
    Shipment.objects.get_or_create(order_id=event.data["order_id"], defaults={"items": event.data["items"]})
