from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from core.db import insert_unless_exists
from orders.metrics import PAYMENTS
from orders.models import Order, OrderStatus, Payment, Refund
from orders.services.holds import give_back_holds
from orders.services.refunds import request_refund
from orders.services.slots import release_pending_slots
from orders.transitions import move_orders
from outbox.services import record_event


@dataclass(frozen=True)
class PaymentResult:
    payment: Payment
    redelivered: bool


@transaction.atomic
def handle_payment_webhook(
    *, payment_id: str, order_id: int, amount: int, currency: str, status: str, raw_body: str
) -> PaymentResult:
    """Apply one provider callback exactly once.

    The payment row is inserted first (unique provider id): a redelivery, even
    a concurrent one, finds it and does nothing. A success moves the order
    PENDING_PAYMENT -> PAID with one conditional UPDATE, so it and the expiry
    job cannot both win; when the order is not pending any more (expired,
    cancelled, already paid) or the money does not match, the payment is
    refunded and the order is left as it is.
    """
    now = timezone.now()
    order = Order.objects.filter(id=order_id).first() if order_id < 2**63 else None
    payment = Payment(
        provider_payment_id=payment_id,
        order=order,
        amount=amount,
        currency=currency,
        status=status,
        outcome=Payment.Outcome.FAILED,
        received_at=now,
        raw_body=raw_body,
    )
    if insert_unless_exists(payment, conflict_fields=["provider_payment_id"]) is None:
        return PaymentResult(Payment.objects.get(provider_payment_id=payment_id), redelivered=True)
    if status == Payment.Status.FAILED:
        transaction.on_commit(lambda: PAYMENTS.labels("failed").inc())
        return PaymentResult(payment, redelivered=False)  # the order waits for another try or expiry

    refund_reason = None
    if order is None:
        refund_reason = Refund.Reason.UNKNOWN_ORDER
    elif (amount, currency) != (order.total_amount, order.currency):
        refund_reason = Refund.Reason.AMOUNT_MISMATCH
    else:
        if move_orders([order.id], OrderStatus.PAID, at=now):
            release_pending_slots(customer_ids=[order.customer_id])
            give_back_holds(order_ids=[order.id])
            _announce_paid(order=order, payment=payment, paid_at=now)
        else:
            refund_reason = Refund.Reason.ORDER_NOT_PENDING

    payment.outcome = Payment.Outcome.REFUNDED if refund_reason else Payment.Outcome.APPLIED
    Payment.objects.filter(id=payment.id).update(outcome=payment.outcome)
    if refund_reason:
        request_refund(payment=payment, order=order, reason=refund_reason)
    transaction.on_commit(lambda: PAYMENTS.labels(payment.outcome).inc())
    return PaymentResult(payment, redelivered=False)


def _announce_paid(*, order: Order, payment: Payment, paid_at) -> None:
    items = list(order.items.values_list("product_id", "name", "quantity", "unit_price", "discount"))
    record_event(
        aggregate_type="order",
        aggregate_id=order.id,
        event_type="OrderPaid",
        data={
            "order_id": order.id,
            "customer_id": order.customer_id,
            "payment_id": payment.provider_payment_id,
            "total": order.total_amount,
            "currency": order.currency,
            "paid_at": paid_at.isoformat(),
            "items": [
                {"sku": s, "name": n, "quantity": q, "unit_price": p, "discount": d} for s, n, q, p, d in items
            ],
            "shipping_address": order.shipping_address,
        },
    )
