"""An Idempotency-Key names one checkout: the same key again is answered with
the order it made, whichever path (direct or queued) made it."""

from orders.exceptions import IdempotencyKeyReused
from orders.models import Order


def order_under_key(*, customer_id: int, idempotency_key: str) -> Order | None:
    """One lookup on the unique (customer, key) index; its items and refunds only when found."""
    found = Order.objects.filter(customer_id=customer_id, idempotency_key=idempotency_key).order_by()
    return next(iter(found.prefetch_related("items", "refunds")[:1]), None)


def same_request(order: Order, request_hash: str | None) -> Order:
    """`order`, when the request under its key asked for the same (None: not known
    yet, the cart was already taken); IdempotencyKeyReused otherwise."""
    if request_hash is not None and order.request_hash != request_hash:
        raise IdempotencyKeyReused(order_id=order.id)
    return order
