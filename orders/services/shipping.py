from django.db import transaction
from django.utils import timezone

from inventory.services import ship_order
from orders.exceptions import OrderNotShippable
from orders.models import Order, OrderStatus
from orders.services.cancellation import reserved_lines
from orders.transitions import move_orders
from outbox.services import record_event


@transaction.atomic
def mark_order_shipped(*, order_id: int) -> Order:
    """A paid order leaves the warehouse: PAID -> SHIPPED, its units reserved ->
    shipped and its shipment marked so by the warehouse (inventory.services)."""
    now = timezone.now()
    if not move_orders([order_id], OrderStatus.SHIPPED, at=now):
        raise OrderNotShippable(order_id=order_id)
    order = Order.objects.get(id=order_id)
    items = ship_order(
        order_id=order.id,
        lines=reserved_lines(order_ids=[order.id]),
        shipping_address=order.shipping_address,
        shipped_at=now,
    )
    record_event(
        aggregate_type="order",
        aggregate_id=order.id,
        event_type="OrderShipped",
        data={
            "order_id": order.id,
            "customer_id": order.customer_id,
            "shipped_at": now.isoformat(),
            "items": items,
            "shipping_address": order.shipping_address,
        },
    )
    return order
