"""What leaves the warehouse. The orders app tells it an order left, with the
order's id, lines and address, as its events do; the warehouse keeps no
foreign key into orders."""

from collections.abc import Callable, Mapping
from datetime import datetime

from inventory.models import Shipment
from inventory.services.stock import ship_reserved_stock


def ship_order(
    *, order_id: int, lines: Mapping[str, int], shipping_address: dict | None, shipped_at: datetime
) -> list[dict]:
    """The order's units leave, inside the caller's transaction: reserved ->
    shipped, and its shipment SHIPPED with exactly `lines` (made here when the
    warehouse consumer has not had its OrderPaid yet). Returns the items as the
    events carry them, in SKU order."""
    ship_reserved_stock(lines=lines)
    items = [{"sku": sku, "quantity": quantity} for sku, quantity in sorted(lines.items())]
    shipped = {"status": Shipment.Status.SHIPPED, "shipped_at": shipped_at, "items": items}
    # What leaves is what the order still has (lines staff removed are not in it,
    # even when the warehouse consumer has not heard of the removal yet).
    Shipment.objects.update_or_create(
        order_id=order_id, defaults=shipped, create_defaults={**shipped, "shipping_address": shipping_address}
    )
    return items


def replace_shipment_addresses(*, order_ids: list[int], replace: Callable[[dict], dict]) -> int:
    """The address copy of the orders' shipments, each passed through `replace`
    (a shopper's erasure: orders/services/erasure.py); how many changed."""
    shipments = [s for s in Shipment.objects.filter(order_id__in=order_ids).order_by("id") if s.shipping_address]
    for shipment in shipments:
        shipment.shipping_address = replace(shipment.shipping_address)
    Shipment.objects.bulk_update(shipments, ["shipping_address"], batch_size=500)
    return len(shipments)
