"""Refunds: requested (by staff, for returned or removed units, or for a payment
that came too late), submitted to the provider by the `payments` consumer,
confirmed by the provider's webhook, retried by staff when it failed.

A payment may have several refunds. What they claim together is
`Payment.refunded_amount`, grown by one conditional UPDATE (`refunded_amount
+ amount <= captured_amount`) under the CHECK payment_refunds_within_captured:
two members of staff refunding the same order at once cannot both pass the
captured total. A failed refund gives its claim back; its retry claims again.

Locks, in the order every writer here takes them: the order, its items, the
payment, the stock (SKU order)."""

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from inventory.services import return_reserved_stock
from orders import provider
from orders.exceptions import OrderNotFound, OrderNotRefundable, PaymentNotCaptured, RefundExceedsCaptured
from orders.metrics import REFUNDS_FINISHED, REFUNDS_REQUESTED
from orders.models import Order, OrderItem, OrderStatus, Payment, Refund
from orders.services.cancellation import reopen_gate_units, reserved_lines
from orders.transitions import move_orders, move_payment, move_refund
from outbox.services import record_event

logger = logging.getLogger(__name__)


@transaction.atomic
def refund_paid_order(*, order_id: int, user=None) -> Refund | None:
    """Staff refund of a paid, not yet shipped order whose payment was captured:
    what is left of the money goes back (every unit not removed or refunded
    yet) and the reserved units go back on sale. An order whose money is only
    authorized is cancelled instead (its payment voided). None for an order
    that cost nothing (no money to give back)."""
    order = Order.objects.select_for_update().filter(id=order_id).first()
    if order is None:
        raise OrderNotFound()
    payment = Payment.objects.filter(order_id=order_id, outcome=Payment.Outcome.APPLIED).first()
    if payment is not None and payment.status != Payment.Status.CAPTURED:
        raise OrderNotRefundable(
            "Its payment is only authorized: cancel the order, which releases the money.", order_id=order_id
        )
    if order.status != OrderStatus.PAID or not move_orders([order_id], OrderStatus.REFUNDED):
        raise OrderNotRefundable(order_id=order_id)  # a shipped order is refunded by returns, or an amount
    items = locked_items(order_id=order_id)
    units = [(item, item.shipped_units - item.refunded) for item in items]
    refund = refund_units(order=order, payment=payment, units=units, reason=Refund.Reason.STAFF, user=user)
    return_reserved_stock(lines=reserved_lines(order_ids=[order.id]))
    reopen_gate_units(order_ids=[order.id])
    return refund


@transaction.atomic
def refund_goodwill(*, order_id: int, amount: int, note: str, user=None) -> Refund:
    """Staff give back `amount` (minor units) of a captured order without a
    return: a gesture, a late delivery. Refused past what is left of the
    capture (RefundExceedsCaptured), whatever other refunds run at once."""
    if amount <= 0:
        raise ValueError("amount must be positive")
    order = Order.objects.select_for_update().filter(id=order_id).first()
    if order is None:
        raise OrderNotFound()
    payment = captured_payment(order_id=order_id)
    return request_refund(payment=payment, order=order, reason=Refund.Reason.GOODWILL, amount=amount,
                          note=note, user=user)  # fmt: skip


def captured_payment(*, order_id: int, free_ok: bool = False) -> Payment | None:
    """The payment that paid the order, if its money was taken; else PaymentNotCaptured.
    With `free_ok`, None for an order that cost nothing (no money to give back)."""
    payment = Payment.objects.filter(order_id=order_id, outcome=Payment.Outcome.APPLIED).first()
    if free_ok and (payment is None or payment.amount == 0):
        return None
    if payment is None or payment.status not in (Payment.Status.CAPTURED, Payment.Status.REFUNDED):
        raise PaymentNotCaptured(order_id=order_id)
    return payment


def locked_items(*, order_id: int) -> list[OrderItem]:
    """The order's lines, locked in id order (the order every writer of them takes)."""
    return list(OrderItem.objects.select_for_update().filter(order_id=order_id).order_by("id"))


@dataclass(frozen=True)
class PricedUnits:
    item: OrderItem
    count: int
    amount: int

    def as_line(self) -> dict:
        return {"sku": self.item.product_id, "quantity": self.count, "amount": self.amount}


def price_units(units: Iterable[tuple[OrderItem, int]]) -> list[PricedUnits]:
    """Each line's next `count` units at the price paid for them (after the
    line's discounts, OrderItem.price_of_units), the units removed or refunded
    before counted first. The items must be locked by the caller."""
    return [
        PricedUnits(item, count, item.price_of_units(first=item.cancelled + item.refunded, count=count))
        for item, count in units
        if count > 0
    ]


def refund_units(
    *, order: Order, payment: Payment | None, units: Iterable[tuple[OrderItem, int]], reason: str, user=None
) -> Refund | None:
    """Pay back units of the order (their items locked by the caller): each
    line's `refunded` grows by a conditional UPDATE (never past its shipped
    units), and one refund of their price is requested, capped at what is left
    of the capture (a goodwill refund may have given part of it back already).
    None when there is no money to give back (a free order)."""
    priced = price_units(units)
    for each in priced:
        grown = OrderItem.objects.filter(id=each.item.id, refunded__lte=F("quantity") - F("cancelled") - each.count)
        if not grown.update(refunded=F("refunded") + each.count):
            raise OrderNotRefundable("Those units are refunded already.", order_id=order.id)
    if payment is None:
        return None
    return refund_priced_units(payment=payment, order=order, reason=reason, priced=priced, user=user)


def refund_priced_units(
    *, payment: Payment, order: Order, reason: str, priced: list[PricedUnits], user=None
) -> Refund | None:
    """One refund of the units' price, capped at what is left of the capture
    (a goodwill refund may have given part of it back already); None when
    nothing is left."""
    left = Payment.objects.select_for_update().values_list(F("captured_amount") - F("refunded_amount"), flat=True)
    amount = min(sum(each.amount for each in priced), left.get(id=payment.id))
    if amount <= 0:
        return None
    return request_refund(payment=payment, order=order, reason=reason, amount=amount,
                          lines=[each.as_line() for each in priced], user=user)  # fmt: skip


def request_refund(
    *, payment: Payment, order: Order | None, reason: str, amount: int | None = None, lines: list[dict] = (),
    note: str = "", user=None,
) -> Refund:  # fmt: skip
    """Claim `amount` of what the payment captured (None: all of it, a payment
    that paid no order), record the refund and announce it. Inside the caller's
    transaction. The claim is one conditional UPDATE: RefundExceedsCaptured when
    it would pass the captured total. A SHIPPED order whose payment is then
    all claimed moves to REFUNDED."""
    amount = payment.captured_amount if amount is None else amount
    claimed = Payment.objects.filter(id=payment.id, refunded_amount__lte=F("captured_amount") - amount)
    if not claimed.update(refunded_amount=F("refunded_amount") + amount):
        left = Payment.objects.values_list(F("captured_amount") - F("refunded_amount"), flat=True).get(id=payment.id)
        raise RefundExceedsCaptured(amount=amount, refundable=left)
    transaction.on_commit(lambda: REFUNDS_REQUESTED.labels(reason).inc())
    refund = Refund.objects.create(
        payment=payment, order=order, amount=amount, currency=payment.currency, reason=reason, note=note,
        lines=list(lines), created_by=user,
    )  # fmt: skip
    if order is not None and Payment.objects.filter(id=payment.id, refunded_amount=F("captured_amount")).exists():
        # All of it back: a shipped order is REFUNDED. A paid one keeps its status (its
        # goods still ship): refund_paid_order is what refunds an order before shipping.
        if Order.objects.filter(id=order.id, status=OrderStatus.SHIPPED).exists():
            move_orders([order.id], OrderStatus.REFUNDED)
    announce_refund_requested(refund)
    return refund


def announce_refund_requested(refund: Refund) -> None:
    """RefundRequested for the refund's current attempt (from the second on, `attempt` says which)."""
    order, payment_id = refund.order, refund.payment.provider_payment_id
    record_event(
        aggregate_type="order" if order else "payment",
        aggregate_id=order.id if order else payment_id,
        event_type="RefundRequested",
        data={
            "refund_id": refund.id,
            "order_id": order.id if order else None,
            "customer_id": order.customer_id if order else None,
            "payment_id": payment_id,
            "amount": refund.amount,
            "currency": refund.currency,
            "reason": refund.reason,
            "lines": refund.lines,
            **({"attempt": refund.attempt} if refund.attempt > 1 else {}),
        },
    )


def submit_refund(*, refund_id: int) -> Refund:
    """Call the provider for a REQUESTED refund and mark it SUBMITTED. A refund in
    any other status was submitted already (a redelivered event): no call. The
    call's idempotency key makes a retry after a crash the same refund."""
    refund = Refund.objects.select_related("payment").get(id=refund_id)
    if refund.status != Refund.Status.REQUESTED:
        return refund
    try:
        provider.refund(
            idempotency_key=refund.idempotency_key, refund_id=refund.id,
            payment_id=refund.payment.provider_payment_id, amount=refund.amount, currency=refund.currency,
        )  # fmt: skip
    except provider.ProviderRefused as refused:
        with transaction.atomic():
            _fail(refund, f"refused by the provider: {refused}")
    else:
        move_refund(refund.id, Refund.Status.SUBMITTED, submitted_at=timezone.now())
    refund.refresh_from_db()
    return refund


@dataclass(frozen=True)
class RefundConfirmation:
    refund: Refund | None
    outcome: str  # completed | failed | amount_mismatch | redelivered | unknown_refund


@transaction.atomic
def handle_refund_webhook(
    *, refund_id: int, payment_id: str, amount: int, currency: str, status: str
) -> RefundConfirmation:
    """The provider's word on a refund, applied once: a confirmation for a refund
    already completed or failed changes nothing. An amount or currency other than
    the refund's fails it, flagged for staff; so does a failure. The payment is
    REFUNDED once its completed refunds are all it captured."""
    locked = Refund.objects.select_for_update(of=("self", "payment"))  # as before; the order only read
    refund = locked.select_related("payment", "order").filter(id=refund_id).first()
    if refund is None or refund.payment.provider_payment_id != payment_id:
        logger.warning("refund confirmation for an unknown refund %s (payment %s)", refund_id, payment_id)
        return RefundConfirmation(None, "unknown_refund")
    if refund.status in (Refund.Status.COMPLETED, Refund.Status.FAILED):
        return RefundConfirmation(refund, "redelivered")
    if (amount, currency) != (refund.amount, refund.currency):
        _fail(refund, f"amount_mismatch: the provider confirmed {amount} {currency}")
        outcome = "amount_mismatch"
    elif status == "succeeded":
        now = timezone.now()
        move_refund(refund.id, Refund.Status.COMPLETED, completed_at=now)
        payment = refund.payment  # locked with the refund: completions of one payment in turn
        completed = payment.refunds.filter(status=Refund.Status.COMPLETED).aggregate(total=Sum("amount"))["total"]
        all_back = completed == payment.captured_amount
        if all_back:
            move_payment(payment.id, Payment.Status.REFUNDED)
        record_event(
            aggregate_type="order" if refund.order_id else "payment",
            aggregate_id=refund.order_id or payment_id,
            event_type="RefundCompleted",
            data={"refund_id": refund.id, "order_id": refund.order_id, "payment_id": payment_id,
                  "customer_id": refund.order.customer_id if refund.order_id else None,
                  "amount": refund.amount, "currency": refund.currency, "reason": refund.reason,
                  "lines": refund.lines, "payment_refunded": all_back, "completed_at": now.isoformat()},
        )  # fmt: skip
        outcome = "completed"
    else:
        _fail(refund, "the provider reported the refund failed")
        outcome = "failed"
    transaction.on_commit(lambda: REFUNDS_FINISHED.labels(outcome).inc())
    refund.refresh_from_db()
    return RefundConfirmation(refund, outcome)


def _fail(refund: Refund, reason: str) -> None:
    """FAILED, and its claim on the payment given back (a retry claims again). In a transaction."""
    logger.warning("refund %s failed: %s", refund.id, reason)
    if move_refund(refund.id, Refund.Status.FAILED, failure_reason=reason[:200]):
        Payment.objects.filter(id=refund.payment_id).update(refunded_amount=F("refunded_amount") - refund.amount)


@transaction.atomic
def retry_refund(*, refund_id: int) -> bool:
    """Staff: a FAILED refund requested again, as a new attempt (a new idempotency
    key: the provider answered the last one for good) submitted by the consumer.
    False when it is not FAILED, or when its amount no longer fits in what is
    left of the capture (other refunds took it meanwhile)."""
    refund = Refund.objects.select_related("payment", "order").get(id=refund_id)
    if not move_refund(refund.id, Refund.Status.REQUESTED, failure_reason="", attempt=refund.attempt + 1):
        return False
    claimed = Payment.objects.filter(id=refund.payment_id, refunded_amount__lte=F("captured_amount") - refund.amount)
    if not claimed.update(refunded_amount=F("refunded_amount") + refund.amount):
        transaction.set_rollback(True)
        return False
    refund.attempt += 1
    announce_refund_requested(refund)
    return True
