r"""The order's life as data: which status may follow which, and the one
function that moves orders along it.

Every status change (payment, cancellation by the shopper or staff, expiry,
shipping, refund, the admin's actions) is `move_orders`: one conditional UPDATE
whose WHERE holds the statuses the target may be reached from. Two movers
racing for the same order (a payment and the expiry job) cannot both win: the
first UPDATE changes the row, the second finds its status gone.

    PENDING_PAYMENT --paid--> PAID --shipped--> SHIPPED --all refunded--> REFUNDED
          |                     |  \                                        ^
          +--cancelled/expired--+   +--refunded (before shipping)-----------+
          v                     |  \
      CANCELLED <--cancelled----+   +--authorization lapsed--> PAYMENT_LAPSED
          ^   (its payment only authorized: voided)              |   |
          +------------------cancelled by staff------------------+   |
      PENDING_PAYMENT <------staff ask the shopper to pay again------+

A PAID or SHIPPED order stays so while partly refunded (returns, goodwill,
lines removed): REFUNDED once its refunds claim all that was captured.

An order is written PENDING_PAYMENT, or REJECTED by the queue's writer when the
stock could not cover it; a rejected order moves nowhere.
"""

from collections.abc import Iterable
from datetime import datetime

from django.utils import timezone

from orders.models import Order, OrderStatus, Payment, Refund, Return

TRANSITIONS: frozenset[tuple[OrderStatus, OrderStatus]] = frozenset(
    {
        (OrderStatus.PENDING_PAYMENT, OrderStatus.PAID),
        (OrderStatus.PENDING_PAYMENT, OrderStatus.CANCELLED),
        (OrderStatus.PAID, OrderStatus.SHIPPED),
        (OrderStatus.PAID, OrderStatus.REFUNDED),
        (OrderStatus.SHIPPED, OrderStatus.REFUNDED),
        # Paid with the money only held (an authorized payment): cancelling voids it
        # (orders/services/cancellation.py claims the void in the same transaction).
        (OrderStatus.PAID, OrderStatus.CANCELLED),
        # The authorization lapsed before a capture (orders/services/authorizations.py):
        # staff ask the shopper to pay again, or cancel it (its stock back on sale).
        (OrderStatus.PAID, OrderStatus.PAYMENT_LAPSED),
        (OrderStatus.PAYMENT_LAPSED, OrderStatus.PENDING_PAYMENT),
        (OrderStatus.PAYMENT_LAPSED, OrderStatus.CANCELLED),
    }
)

INITIAL: frozenset[OrderStatus] = frozenset({OrderStatus.PENDING_PAYMENT, OrderStatus.REJECTED})

# The moment of the move, kept on the order where the model has a field for it.
STAMPS: dict[OrderStatus, str] = {
    OrderStatus.PAID: "paid_at",
    OrderStatus.SHIPPED: "shipped_at",
    OrderStatus.CANCELLED: "cancelled_at",
}


def sources(target: OrderStatus) -> list[OrderStatus]:
    """The statuses `target` may be reached from."""
    found = sorted(before for before, after in TRANSITIONS if after == target)
    if not found:
        raise ValueError(f"no order may move to {target}")
    return found


def may_move(current: OrderStatus | str, target: OrderStatus) -> bool:
    return (OrderStatus(current), target) in TRANSITIONS


def move_orders(
    order_ids: Iterable[int], target: OrderStatus, *, at: datetime | None = None, only_from: Iterable[str] = ()
) -> int:
    """Move those of the orders whose status allows it (and is one of `only_from`,
    when given) to `target`; returns how many moved. For one order, 0 means it
    was somewhere `target` cannot follow."""
    stamp = {STAMPS[target]: at or timezone.now()} if target in STAMPS else {}
    allowed = [status for status in sources(target) if not only_from or status in only_from]
    return Order.objects.filter(id__in=list(order_ids), status__in=allowed).update(status=target, **stamp)


# A refund's life: the provider takes the call (SUBMITTED), then confirms
# (COMPLETED, FAILED). Its confirmation may overtake the SUBMITTED mark (the
# webhook can arrive while the submitting transaction is still open), hence
# REQUESTED -> COMPLETED/FAILED. Staff retry a FAILED refund: REQUESTED again.
REFUND_TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (Refund.Status.REQUESTED, Refund.Status.SUBMITTED),
        (Refund.Status.REQUESTED, Refund.Status.COMPLETED),
        (Refund.Status.REQUESTED, Refund.Status.FAILED),
        (Refund.Status.SUBMITTED, Refund.Status.COMPLETED),
        (Refund.Status.SUBMITTED, Refund.Status.FAILED),
        (Refund.Status.FAILED, Refund.Status.REQUESTED),
    }
)


def move_refund(refund_id: int, target: str, **fields) -> bool:
    """Move one refund to `target` (setting `fields`) if its status allows it:
    one conditional UPDATE, so a confirmation and a retry cannot both win."""
    allowed = _reached_from(REFUND_TRANSITIONS, target)
    return bool(Refund.objects.filter(id=refund_id, status__in=allowed).update(status=target, **fields))


def _reached_from(table: frozenset[tuple[str, str]], target: str) -> list[str]:
    return sorted(before for before, after in table if after == target)


# A payment's life (Payment.Status). The shop claims a capture or a void first
# (CAPTURING, VOIDING: one conditional UPDATE decides a capture racing a void),
# then asks the provider, then marks the result. The provider may capture on its
# own (immediate capture: its "captured" webhook), hence AUTHORIZED -> CAPTURED.
PAYMENT_TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (Payment.Status.AUTHORIZED, Payment.Status.CAPTURING),
        (Payment.Status.AUTHORIZED, Payment.Status.VOIDING),
        (Payment.Status.AUTHORIZED, Payment.Status.CAPTURED),
        (Payment.Status.CAPTURING, Payment.Status.CAPTURED),
        (Payment.Status.VOIDING, Payment.Status.VOIDED),
        (Payment.Status.CAPTURED, Payment.Status.REFUNDED),
        # A capture the provider refused (not for a lapse): the claim released.
        (Payment.Status.CAPTURING, Payment.Status.AUTHORIZED),
        # The hold ended before a capture: the provider refused the capture for it, or told us.
        (Payment.Status.AUTHORIZED, Payment.Status.LAPSED),
        (Payment.Status.CAPTURING, Payment.Status.LAPSED),
    }
)
PAYMENT_STAMPS = {Payment.Status.CAPTURED: "captured_at", Payment.Status.VOIDED: "voided_at"}


def move_payment(payment_id: int, target: str, *, at: datetime | None = None, **fields) -> bool:
    """Move one payment to `target` if its status allows it, stamping the moment
    where the model keeps one (and setting `fields`): one conditional UPDATE."""
    allowed = _reached_from(PAYMENT_TRANSITIONS, target)
    stamp = {PAYMENT_STAMPS[target]: at or timezone.now()} if target in PAYMENT_STAMPS else {}
    return bool(Payment.objects.filter(id=payment_id, status__in=allowed).update(status=target, **stamp, **fields))


# A return's life: staff approve or reject it; a parcel that arrives first is
# received all the same (REQUESTED -> RECEIVED: receiving is approving).
RETURN_TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (Return.Status.REQUESTED, Return.Status.APPROVED),
        (Return.Status.REQUESTED, Return.Status.REJECTED),
        (Return.Status.REQUESTED, Return.Status.RECEIVED),
        (Return.Status.APPROVED, Return.Status.RECEIVED),
    }
)


def move_return(return_id: int, target: str, **fields) -> bool:
    """Move one return to `target` if its status allows it: one conditional
    UPDATE, so two members of staff deciding at once cannot both win."""
    allowed = _reached_from(RETURN_TRANSITIONS, target)
    return bool(Return.objects.filter(id=return_id, status__in=allowed).update(status=target, **fields))
