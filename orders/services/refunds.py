"""Refunds: requested (by staff, or for a payment that came too late), submitted
to the provider by the `payments` consumer, confirmed by the provider's webhook,
retried by staff when it failed."""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from inventory.services import return_reserved_stock
from orders import provider
from orders.exceptions import OrderNotRefundable
from orders.metrics import REFUNDS_FINISHED, REFUNDS_REQUESTED
from orders.models import Order, OrderStatus, Payment, Refund
from orders.services.cancellation import reopen_gate_units, reserved_lines
from orders.transitions import move_orders, move_payment, move_refund
from outbox.services import record_event

logger = logging.getLogger(__name__)


@transaction.atomic
def refund_paid_order(*, order_id: int, user=None) -> Refund:
    """Staff refund of a paid, not yet shipped order whose payment was captured:
    the money goes back and the reserved units go back on sale. An order whose
    money is only authorized is cancelled instead (its payment voided)."""
    payment = Payment.objects.filter(order_id=order_id, outcome=Payment.Outcome.APPLIED).first()
    if payment is not None and payment.status != Payment.Status.CAPTURED:
        raise OrderNotRefundable(
            "Its payment is only authorized: cancel the order, which releases the money.", order_id=order_id
        )
    if not move_orders([order_id], OrderStatus.REFUNDED):
        raise OrderNotRefundable(order_id=order_id)
    order = Order.objects.get(id=order_id)
    return_reserved_stock(lines=reserved_lines(order_ids=[order.id]))
    reopen_gate_units(order_ids=[order.id])
    return request_refund(payment=payment, order=order, reason=Refund.Reason.STAFF, user=user)


def request_refund(*, payment: Payment, order: Order | None, reason: str, user=None) -> Refund:
    """Record a refund of the whole payment and announce it. Inside the caller's transaction."""
    transaction.on_commit(lambda: REFUNDS_REQUESTED.labels(reason).inc())
    refund = Refund.objects.create(
        payment=payment, order=order, amount=payment.amount, currency=payment.currency, reason=reason, created_by=user
    )
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
    the refund's fails it, flagged for staff; so does a failure."""
    refund = Refund.objects.select_for_update().select_related("payment").filter(id=refund_id).first()
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
        move_payment(refund.payment_id, Payment.Status.REFUNDED)
        record_event(
            aggregate_type="order" if refund.order_id else "payment",
            aggregate_id=refund.order_id or payment_id,
            event_type="RefundCompleted",
            data={"refund_id": refund.id, "order_id": refund.order_id, "payment_id": payment_id,
                  "amount": refund.amount, "currency": refund.currency, "completed_at": now.isoformat()},  # fmt: skip
        )
        outcome = "completed"
    else:
        _fail(refund, "the provider reported the refund failed")
        outcome = "failed"
    transaction.on_commit(lambda: REFUNDS_FINISHED.labels(outcome).inc())
    refund.refresh_from_db()
    return RefundConfirmation(refund, outcome)


def _fail(refund: Refund, reason: str) -> None:
    logger.warning("refund %s failed: %s", refund.id, reason)
    move_refund(refund.id, Refund.Status.FAILED, failure_reason=reason[:200])


@transaction.atomic
def retry_refund(*, refund_id: int) -> bool:
    """Staff: a FAILED refund requested again, as a new attempt (a new idempotency
    key: the provider answered the last one for good) submitted by the consumer."""
    refund = Refund.objects.select_related("payment", "order").get(id=refund_id)
    if not move_refund(refund.id, Refund.Status.REQUESTED, failure_reason="", attempt=refund.attempt + 1):
        return False
    refund.attempt += 1
    announce_refund_requested(refund)
    return True
