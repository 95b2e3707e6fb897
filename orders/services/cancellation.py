import logging
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.locks import for_update
from inventory import gate
from inventory.services import return_reserved_stock
from inventory.services.flash_sales import gated_skus
from orders.exceptions import OrderNotCancellable, OrderNotFound
from orders.metrics import ORDERS_EXPIRED
from orders.models import Order, OrderItem, OrderStatus
from orders.money import claim_void
from orders.services.holds import give_back_holds
from orders.services.slots import release_pending_slots
from orders.transitions import move_orders, sources
from outbox.services import NewEvent, record_events
from shop.promotions import give_back_vouchers

logger = logging.getLogger(__name__)


def cancel_orders(*, order_ids: list[int], reason: str, now: datetime | None = None) -> list[int]:
    """Cancel those of `order_ids` still awaiting payment, or paid with money
    only held (an authorized payment, not captured), put their stock back on
    sale and give back their vouchers' uses; returns the ids that were
    cancelled. Inside the caller's transaction. The orders are locked first (a
    payment being applied to one now is waited for, then decides it), then
    moved by one conditional UPDATE: a concurrent payment and this cancellation
    are exclusive. A paid order's payment is claimed for a void in the same
    transaction (AUTHORIZED -> VOIDING): a capture racing it cannot also win,
    and a payment already captured (or being captured) keeps its order; the
    `payments` consumer then has the provider release the money (OrderCancelled).
    An order whose payment lapsed (PAYMENT_LAPSED) is cancelled as a paid one,
    with no money to release."""
    if not order_ids:
        return []
    now = now or timezone.now()
    cancellable = Order.objects.filter(id__in=order_ids, status__in=sources(OrderStatus.CANCELLED))
    found = list(for_update(cancellable).values_list("id", "customer_id", "status"))
    pending = [(order_id, customer) for order_id, customer, status in found if status == OrderStatus.PENDING_PAYMENT]
    # With immediate capture the money of a paid order is taken (or about to be): refunded, never voided.
    voidable = settings.PAYMENT_CAPTURE == "on_shipment"
    paid = [
        (order_id, customer)
        for order_id, customer, status in found
        if (status == OrderStatus.PAID and voidable and claim_void(order_id=order_id))
        or status == OrderStatus.PAYMENT_LAPSED  # its money is gone already: nothing to void
    ]
    return _cancel_locked(pending, reason=reason, now=now, paid=paid)


def _cancel_locked(
    orders: list[tuple[int, int]], *, reason: str, now: datetime, paid: list[tuple[int, int]] = ()
) -> list[int]:
    """Cancel (id, customer) pairs this transaction holds locked: `orders` still
    pending, `paid` paid with their payment claimed for a void."""
    if not orders and not paid:
        return []
    ids = [order_id for order_id, _ in orders]
    every = sorted([*ids, *(order_id for order_id, _ in paid)])
    move_orders(every, OrderStatus.CANCELLED, at=now)
    was_paid = {order_id for order_id, _ in paid}
    data = [
        {"order_id": order_id, "customer_id": customer, "reason": reason, "was_paid": order_id in was_paid}
        for order_id, customer in sorted([*orders, *paid])
    ]
    record_events([NewEvent("order", each["order_id"], "OrderCancelled", each) for each in data])
    # A paid order took no slot and no unpaid holds any more: only the pending ones give them back.
    release_pending_slots(customer_ids=[customer for _, customer in orders])
    give_back_holds(order_ids=ids)
    give_back_vouchers(order_ids=every)  # before the stock: vouchers' rows are locked first everywhere
    return_reserved_stock(lines=reserved_lines(order_ids=every))
    reopen_gate_units(order_ids=every)
    return every


def reserved_lines(*, order_ids: list[int]) -> dict[str, int]:
    """{sku: units} the orders hold (lines staff removed before shipping are
    back on sale already), summed per SKU by the database."""
    rows = (
        OrderItem.objects.filter(order_id__in=order_ids)
        .values("product_id")
        .annotate(units=Sum(F("quantity") - F("cancelled")))
    )
    return {row["product_id"]: row["units"] for row in rows if row["units"]}


def reopen_gate_units(*, order_ids: list[int]) -> None:
    """Units of a flash-sale SKU back on sale in the database go back through
    the gate too (and the shopper may buy again), once the cancel commits."""
    limits = gated_skus()
    if not limits:
        return
    by_customer: dict[int, dict[str, int]] = {}
    rows = OrderItem.objects.filter(order_id__in=order_ids, product_id__in=list(limits)).values_list(
        "order__customer_id", "product_id", F("quantity") - F("cancelled")
    )
    for customer_id, sku, quantity in rows:
        lines = by_customer.setdefault(customer_id, {})
        lines[sku] = lines.get(sku, 0) + quantity
    if by_customer:
        transaction.on_commit(lambda: _release_all(by_customer))


def reopen_gate_lines(*, customer_id: int, lines: dict[str, int]) -> None:
    """reopen_gate_units for units staff removed from one shopper's order."""
    limits = gated_skus()
    gated = {sku: units for sku, units in lines.items() if sku in limits and units}
    if gated:
        transaction.on_commit(lambda: _release_all({customer_id: gated}))


def _release_all(by_customer: dict[int, dict[str, int]]) -> None:
    for customer_id, lines in by_customer.items():
        try:
            gate.release(customer_id=customer_id, lines=lines)
        except Exception:  # the gate then undersells until flash_sale_sync; it never oversells
            logger.exception("could not reopen gate units %s of customer %s", lines, customer_id)


def expire_unpaid_orders(*, batch_size: int | None = None, now: datetime | None = None) -> int:
    """Cancel every PENDING_PAYMENT order past `expires_at`, one bounded
    transaction per batch. Orders locked by a payment being applied right now
    are skipped, never waited on; the payment decides them. Returns the count."""
    batch_size = batch_size or settings.ORDER_EXPIRY_BATCH_SIZE
    total = 0
    while True:
        with transaction.atomic():
            moment = now or timezone.now()
            due = list(
                for_update(Order.objects.pending_expired(moment).order_by("expires_at"), skip_locked=True).values_list(
                    "id", "customer_id"
                )[:batch_size]
            )
            if not due:
                return total
            expired = _cancel_locked(due, reason="expired", now=moment)
            total += len(expired)
            transaction.on_commit(partial(ORDERS_EXPIRED.inc, len(expired)))
        if len(due) < batch_size:
            return total


@transaction.atomic
def cancel_customer_order(*, customer_id: int, order_id: int) -> Order:
    """A shopper cancels their own order while it awaits payment."""
    order = Order.objects.filter(id=order_id, customer_id=customer_id).first()
    if order is None:
        raise OrderNotFound()
    if not cancel_orders(order_ids=[order.id], reason="cancelled_by_customer"):
        raise OrderNotCancellable(order_id=order.id, status=Order.objects.get(id=order.id).status)
    return Order.objects.prefetch_related("items", "refunds").get(id=order.id)


@transaction.atomic
def cancel_pending_order(*, order_id: int, reason: str = "cancelled_by_staff") -> bool:
    return bool(cancel_orders(order_ids=[order_id], reason=reason))
