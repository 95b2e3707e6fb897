from django.db import transaction
from django.utils import timezone

from inventory.models import Shipment
from inventory.services import ship_reserved_stock
from orders.exceptions import OrderNotShippable
from orders.models import Order, OrderStatus
from orders.services.cancellation import reserved_lines
from orders.transitions import move_orders
from outbox.services import record_event


@transaction.atomic
def mark_order_shipped(*, order_id: int) -> Order:
    """A paid order leaves the warehouse: PAID -> SHIPPED, its units reserved -> shipped."""
    now = timezone.now()
    if not move_orders([order_id], OrderStatus.SHIPPED, at=now):
        raise OrderNotShippable(order_id=order_id)
    shipping = reserved_lines(order_ids=[order_id])
    ship_reserved_stock(lines=shipping)
    order = Order.objects.get(id=order_id)
    items = [{"sku": sku, "quantity": quantity} for sku, quantity in sorted(shipping.items())]
    Shipment.objects.update_or_create(
        # What leaves is what the order still has (lines staff removed are not in it,
        # even when the warehouse consumer has not heard of the removal yet).
        order_id=order.id, defaults={"status": Shipment.Status.SHIPPED, "shipped_at": now, "items": items},
        create_defaults={
            "status": Shipment.Status.SHIPPED, "shipped_at": now, "items": items,
            "shipping_address": order.shipping_address,
        },
    )
    record_event(
        aggregate_type="order",
        aggregate_id=order.id,
        event_type="OrderShipped",
        data={"order_id": order.id, "customer_id": order.customer_id, "shipped_at": now.isoformat(), "items": items,
              "shipping_address": order.shipping_address},  # fmt: skip
    )
    return order
