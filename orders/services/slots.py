"""Pending-order slots: how many unpaid orders each customer holds
(MAX_PENDING_ORDERS_PER_CUSTOMER), kept in order_pending_counts."""

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Greatest

from core.db import CompiledUpdate
from orders.models import PendingOrderCount


def take_pending_slot(*, customer_id: int) -> bool:
    """One of the customer's MAX_PENDING_ORDERS_PER_CUSTOMER slots for an unpaid
    order, or False when all are taken: one conditional UPDATE of the counter
    every account gets when created (orders/signals.py). Its row lock also
    orders the customer's concurrent checkouts."""
    limit = settings.MAX_PENDING_ORDERS_PER_CUSTOMER
    if _TAKE_SLOT(customer_id=customer_id, limit=limit):
        return True
    # An account made without signals (a bulk load) has no counter yet: give it one.
    PendingOrderCount.objects.bulk_create(
        [PendingOrderCount(customer_id=customer_id, pending=0)], ignore_conflicts=True
    )
    return bool(_TAKE_SLOT(customer_id=customer_id, limit=limit))


_TAKE_SLOT = CompiledUpdate(
    lambda customer_id, limit: (
        PendingOrderCount.objects.filter(customer_id=customer_id, pending__lt=limit),
        {"pending": F("pending") + 1},
    ),
    customer_id=int,
    limit=int,
)


def release_pending_slots(*, customer_ids: list[int]) -> None:
    """Orders left PENDING_PAYMENT (or were never made): their customers' slots
    are free again. Never below zero: an order written around checkout (a bulk
    load) never took one."""
    _count_pending(customer_ids, taken=False)


def count_pending_orders(*, customer_ids: list[int]) -> None:
    """Orders written PENDING_PAYMENT outside checkout (the queue's writer): their
    customers' slots are taken, without the limit (the flash sale's per-customer
    limit, checked by the gate, is what bounds them)."""
    _count_pending(customer_ids, taken=True)


def _count_pending(customer_ids: list[int], *, taken: bool) -> None:
    """One UPDATE per distinct number of orders per customer."""
    per_customer: dict[int, int] = {}
    for customer_id in customer_ids:
        per_customer[customer_id] = per_customer.get(customer_id, 0) + 1
    by_count: dict[int, list[int]] = {}
    for customer_id, count in per_customer.items():
        by_count.setdefault(count, []).append(customer_id)
    for count, customers in sorted(by_count.items()):
        pending = F("pending") + count if taken else Greatest(F("pending") - count, 0)
        PendingOrderCount.objects.filter(customer_id__any=customers).update(pending=pending)
