"""The lock calls for an order's rows, in the order core/locks.py declares
(order → returns → items → payment → pending-order counter → …): a service
that locks several kinds calls these top to bottom."""

from collections.abc import Iterable

from core.locks import for_update
from orders.models import Order, OrderItem, PendingOrderCount


def lock_order(order_id: int, **filters) -> Order | None:
    """The order, locked (None when there is none matching)."""
    return for_update(Order.objects.filter(id=order_id, **filters)).first()


def lock_orders(order_ids: Iterable[int]) -> list[Order]:
    """The orders, locked in id order."""
    return list(for_update(Order.objects.filter(id__in=list(order_ids))))


def lock_items(*, order_id: int) -> list[OrderItem]:
    """The order's lines, locked in id order (the order every writer of them takes)."""
    return list(for_update(OrderItem.objects.filter(order_id=order_id)))


def lock_pending_counts(*, customer_ids: Iterable[int]) -> None:
    """The customers' pending-order counters, locked in customer order (the
    queue's writer counts their orders after locking vouchers and stock)."""
    list(for_update(PendingOrderCount.objects.filter(customer_id__any=sorted(set(customer_ids)))).values_list("pk"))
