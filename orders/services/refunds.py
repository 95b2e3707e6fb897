"""Refunds: requested (by staff, for returned or removed units, or for a payment
that came too late), submitted to the provider by the `payments` consumer,
confirmed by the provider's webhook, retried by staff when it failed.

A payment may have several refunds. What they claim together is
`Payment.refunded_amount`, grown by one conditional UPDATE (`refunded_amount
+ amount <= captured_amount`) under the CHECK payment_refunds_within_captured:
two members of staff refunding the same order at once cannot both pass the
captured total. A failed refund gives its claim back; its retry claims again.

Which payment paid the order, what can be refunded, the claim and when the
order becomes REFUNDED are orders/money.py's; locks are taken as
core/locks.py declares (order, items, payment, stock)."""

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.locks import for_update
from inventory.services import return_reserved_stock
from orders import money, provider
from orders.exceptions import OrderNotFound, OrderNotRefundable
from orders.locks import lock_items, lock_order
from orders.metrics import REFUNDS_FINISHED, REFUNDS_REQUESTED
from orders.models import Order, OrderItem, OrderStatus, Payment, Refund
from orders.services.cancellation import reopen_gate_units, reserved_lines
from orders.transitions import move_orders, move_payment, move_refund
from outbox.services import record_event
from shop.pricing import largest_remainder

logger = logging.getLogger(__name__)


@transaction.atomic
def refund_paid_order(*, order_id: int, user=None) -> Refund | None:
    """Staff refund of a paid, not yet shipped order whose payment was captured:
    what is left of the money goes back (every unit not removed or refunded
    yet, and the shipping) and the reserved units go back on sale. An order whose money is only
    authorized is cancelled instead (its payment voided). None for an order
    that cost nothing (no money to give back)."""
    order = lock_order(order_id)
    if order is None:
        raise OrderNotFound()
    payment = money.applied_payment(order_id=order_id)
    if money.is_held(payment):
        raise OrderNotRefundable(
            "Its payment is only authorized: cancel the order, which releases the money.", order_id=order_id
        )
    if order.status != OrderStatus.PAID or not move_orders([order_id], OrderStatus.REFUNDED):
        raise OrderNotRefundable(order_id=order_id)  # a shipped order is refunded by returns, or an amount
    items = lock_items(order_id=order_id)
    units = [(item, item.shipped_units - item.refunded) for item in items]
    shipping = ShippingBack.of(order)
    reason = Refund.Reason.STAFF
    refund = refund_units(order=order, payment=payment, units=units, reason=reason, user=user, shipping=shipping)
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
    order = lock_order(order_id)
    if order is None:
        raise OrderNotFound()
    payment = money.captured_payment(order_id=order_id)
    return request_refund(
        payment=payment, order=order, reason=Refund.Reason.GOODWILL, amount=amount, note=note, user=user
    )


@dataclass(frozen=True)
class ShippingBack:
    """An order's shipping charge, paid back with the whole order (never with returned units)."""

    code: str
    amount: int
    tax: int

    @classmethod
    def of(cls, order: Order) -> "ShippingBack | None":
        if not order.shipping_amount:
            return None
        return cls(order.shipping["code"], order.shipping_amount, order.shipping["tax"])

    def as_line(self) -> dict:
        return {"shipping": self.code, "amount": self.amount, "tax": self.tax}


@dataclass(frozen=True)
class PricedUnits:
    item: OrderItem
    count: int
    amount: int  # what they were charged, tax included
    tax: int  # the tax in `amount`

    def as_line(self) -> dict:
        return {"sku": self.item.product_id, "quantity": self.count, "amount": self.amount, "tax": self.tax}


def price_units(units: Iterable[tuple[OrderItem, int]]) -> list[PricedUnits]:
    """Each line's next `count` units at the price paid for them (after the
    line's discounts, OrderItem.price_of_units), the units removed or refunded
    before counted first. The items must be locked by the caller."""
    priced = []
    for item, count in units:
        if count > 0:
            first = item.cancelled + item.refunded
            priced.append(
                PricedUnits(
                    item,
                    count,
                    item.price_of_units(first=first, count=count),
                    item.tax_of_units(first=first, count=count),
                )
            )
    return priced


def refund_units(
    *,
    order: Order,
    payment: Payment | None,
    units: Iterable[tuple[OrderItem, int]],
    reason: str,
    user=None,
    shipping: ShippingBack | None = None,
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
    return refund_priced_units(payment=payment, order=order, reason=reason, priced=priced, user=user, shipping=shipping)


def refund_priced_units(
    *,
    payment: Payment,
    order: Order,
    reason: str,
    priced: list[PricedUnits],
    user=None,
    shipping: ShippingBack | None = None,
) -> Refund | None:
    """One refund of the units' price (and `shipping`, when it goes back too),
    capped at what is left of the capture (a goodwill refund may have given
    part of it back already); None when nothing is left."""
    lines = [each.as_line() for each in priced] + ([shipping.as_line()] if shipping else [])
    owed = sum(line["amount"] for line in lines)
    amount = min(owed, money.refundable(payment_id=payment.id, lock=True))
    if amount <= 0:
        return None
    if amount < owed:  # what is left is shared over the lines, and so is their tax: a credit note adds up
        shares = largest_remainder(amount, [line["amount"] for line in lines])
        lines = [
            {**line, "amount": share, "tax": line["tax"] * share // line["amount"] if line["amount"] else 0}
            for line, share in zip(lines, shares, strict=True)
        ]
    return request_refund(payment=payment, order=order, reason=reason, amount=amount, lines=lines, user=user)


def request_refund(
    *,
    payment: Payment,
    order: Order | None,
    reason: str,
    amount: int | None = None,
    lines: list[dict] = (),
    note: str = "",
    user=None,
) -> Refund:
    """Claim `amount` of what the payment captured (None: all of it, a payment
    that paid no order), record the refund and announce it. Inside the caller's
    transaction, the order (if any) locked by the caller. The claim is
    money.claim_refund: RefundExceedsCaptured when it would pass the captured
    total. The order moves to REFUNDED only when this is the payment that paid
    it, now all claimed back (money.refund_the_order_if_paid_back)."""
    amount = payment.captured_amount if amount is None else amount
    money.claim_refund(payment=payment, amount=amount)
    transaction.on_commit(lambda: REFUNDS_REQUESTED.labels(reason).inc())
    refund = Refund.objects.create(
        payment=payment,
        order=order,
        amount=amount,
        currency=payment.currency,
        reason=reason,
        note=note,
        lines=list(lines),
        created_by=user,
    )
    if order is not None:
        money.refund_the_order_if_paid_back(order=order, payment=payment)
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
            idempotency_key=refund.idempotency_key,
            refund_id=refund.id,
            payment_id=refund.payment.provider_payment_id,
            amount=refund.amount,
            currency=refund.currency,
        )
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
    # The refund and its payment (one rank, core/locks.py); the order only read.
    found = Refund.objects.select_related("payment", "order").filter(id=refund_id)
    refund = for_update(found, of=("self", "payment")).first()
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
            data={
                "refund_id": refund.id,
                "order_id": refund.order_id,
                "payment_id": payment_id,
                "customer_id": refund.order.customer_id if refund.order_id else None,
                "amount": refund.amount,
                "currency": refund.currency,
                "reason": refund.reason,
                "lines": refund.lines,
                "payment_refunded": all_back,
                "completed_at": now.isoformat(),
            },
        )
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
        money.release_refund_claim(payment_id=refund.payment_id, amount=refund.amount)


@transaction.atomic
def retry_refund(*, refund_id: int) -> bool:
    """Staff: a FAILED refund requested again, as a new attempt (a new idempotency
    key: the provider answered the last one for good) submitted by the consumer.
    False when it is not FAILED, or when its amount no longer fits in what is
    left of the capture (other refunds took it meanwhile)."""
    refund = Refund.objects.select_related("payment", "order").get(id=refund_id)
    if not move_refund(refund.id, Refund.Status.REQUESTED, failure_reason="", attempt=refund.attempt + 1):
        return False
    if not money.try_claim_refund(payment_id=refund.payment_id, amount=refund.amount):
        transaction.set_rollback(True)
        return False
    refund.attempt += 1
    announce_refund_requested(refund)
    return True
