"""An order's money, answered in one place.

Every module that needs to know which payment paid an order, how much of it
is held, captured or still refundable, or that claims a refund, claims a void,
or decides that an order is REFUNDED, asks here; none queries `Payment` for
those itself. Reads first (selectors), then the writes (each one conditional
UPDATE under the CHECK payment_refunds_within_captured, inside the caller's
transaction, with the caller holding the order's lock where it changes one:
orders/locks.py).

The rules:
- An order is paid by at most one payment: the one whose outcome is APPLIED
  (the partial unique index payment_one_applied_per_order). Any other payment
  for it paid nothing, and is voided or refunded on its own.
- The money is *held* while that payment is authorized and not yet taken or
  released (a capture or void claimed and not answered counts as held).
- What can be refunded is what was captured less what refunds claimed; the
  claim grows by one conditional UPDATE, so no race can over-refund.
- An order becomes REFUNDED only when the payment that paid it is refunded in
  full, and only once shipped (a paid order refunded before shipping is
  refund_paid_order's, which cancels its units too).
- The shop captures what the order costs when it is captured, never more (lines
  removed before shipping are not taken); money a provider took beyond that is
  given back at once (`excess_capture`)."""

from django.db.models import F

from core.locks import for_update
from orders.exceptions import PaymentNotCaptured, RefundExceedsCaptured
from orders.models import CAPTURED_STATUSES, Order, OrderStatus, Payment
from orders.transitions import move_orders, move_payment

HELD = (Payment.Status.AUTHORIZED, Payment.Status.CAPTURING, Payment.Status.VOIDING)


# Reads


def applied_payment(*, order_id: int, lock: bool = False) -> Payment | None:
    """The payment that paid the order (None: unpaid, or free). `lock`: the row
    locked, for a caller that holds the order's lock and will change it."""
    payments = Payment.objects.filter(order_id=order_id, outcome=Payment.Outcome.APPLIED)
    return (for_update(payments) if lock else payments).first()


def held_payment(*, order_id: int) -> Payment | None:
    """The payment that paid the order while its money is held: authorized, not
    yet taken or released (claims the provider has not answered included)."""
    return Payment.objects.filter(order_id=order_id, outcome=Payment.Outcome.APPLIED, status__in=HELD).first()


def is_held(payment: Payment | None) -> bool:
    return payment is not None and payment.status in HELD


def is_taken(payment: Payment | None) -> bool:
    return payment is not None and payment.status in CAPTURED_STATUSES


def is_settling(payment: Payment | None) -> bool:
    """A capture or a void claimed, the provider not answered yet: the amounts must not move under it."""
    return payment is not None and payment.status in (Payment.Status.CAPTURING, Payment.Status.VOIDING)


def captured_payment(*, order_id: int, free_ok: bool = False) -> Payment | None:
    """The payment that paid the order, if its money was taken; else PaymentNotCaptured.
    With `free_ok`, None for an order that cost nothing (no money to give back)."""
    payment = applied_payment(order_id=order_id)
    if free_ok and (payment is None or payment.amount == 0):
        return None
    if not is_taken(payment):
        raise PaymentNotCaptured(order_id=order_id)
    return payment


def refundable(*, payment_id: int, lock: bool = False) -> int:
    """What the payment captured and no refund claimed yet."""
    left = Payment.objects.filter(id=payment_id).values_list(F("captured_amount") - F("refunded_amount"), flat=True)
    return (for_update(left) if lock else left).get()


def amount_to_capture(payment: Payment) -> int:
    """What the order costs now: less than was authorized when staff removed
    lines before shipping (the rest of the authorization is released with the
    capture). Read once the capture is claimed: a removal refuses to run under
    a claim (orders/services/amendments.py). A payment that paid no order: all."""
    if payment.order_id is None or payment.outcome != Payment.Outcome.APPLIED:
        return payment.amount
    return min(payment.amount, Order.objects.values_list("total_amount", flat=True).get(id=payment.order_id))


def excess_captured(payment: Payment) -> int:
    """Money the provider took for the order beyond what the order costs (its
    own capture of the whole authorization after lines were removed), not yet
    claimed back by a refund."""
    if payment.outcome != Payment.Outcome.APPLIED or payment.order_id is None:
        return 0
    return max(0, payment.captured_amount - payment.refunded_amount - amount_to_capture(payment))


# Writes


def try_claim_refund(*, payment_id: int, amount: int) -> bool:
    """`amount` of the payment's capture claimed for a refund: one conditional
    UPDATE; False when it would pass what was captured (nothing claimed)."""
    claimed = Payment.objects.filter(id=payment_id, refunded_amount__lte=F("captured_amount") - amount)
    return bool(claimed.update(refunded_amount=F("refunded_amount") + amount))


def claim_refund(*, payment: Payment, amount: int) -> None:
    """try_claim_refund, raising RefundExceedsCaptured (with what is left) when it does not fit."""
    if not try_claim_refund(payment_id=payment.id, amount=amount):
        raise RefundExceedsCaptured(amount=amount, refundable=refundable(payment_id=payment.id))


def release_refund_claim(*, payment_id: int, amount: int) -> None:
    """A failed refund's claim given back (its retry claims again)."""
    Payment.objects.filter(id=payment_id).update(refunded_amount=F("refunded_amount") - amount)


def refund_the_order_if_paid_back(*, order: Order, payment: Payment) -> bool:
    """A SHIPPED order becomes REFUNDED once the payment that paid it is all
    claimed back, its shipping aside (returned units do not pay shipping back:
    docs/architecture.md, "Totals"); a refund of any other payment (a duplicate,
    a late one) never moves the order. The caller holds the order's lock."""
    if payment.outcome != Payment.Outcome.APPLIED or payment.order_id != order.id:
        return False
    kept = F("captured_amount") - min(order.shipping_amount, payment.captured_amount)
    if not Payment.objects.filter(id=payment.id, refunded_amount__gte=kept).exists():
        return False
    return bool(move_orders([order.id], OrderStatus.REFUNDED, only_from=[OrderStatus.SHIPPED]))


def claim_void(*, order_id: int) -> bool:
    """The payment that paid the order claimed for a void (AUTHORIZED ->
    VOIDING), or found claimed so: whether its money is only held and now on its
    way back (a capture claimed first keeps it). The caller holds the order's lock."""
    payment = held_payment(order_id=order_id)
    if payment is None:
        return False
    return move_payment(payment.id, Payment.Status.VOIDING) or payment.status == Payment.Status.VOIDING
