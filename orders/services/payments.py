"""A payment's life at the shop: the provider's webhook tells of an
authorization, a capture or a failure (handle_payment_webhook); the shop
captures an authorized payment when the order ships and voids it when the
order is cancelled before (capture_payment, void_payment, from the `payments`
consumer or staff). Each step is one conditional update of the payment
(orders/transitions.py PAYMENT_TRANSITIONS) and an event in the outbox."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.db import insert_unless_exists
from core.locks import for_update
from orders import money, provider
from orders.locks import lock_orders
from orders.metrics import PAYMENTS
from orders.models import Order, OrderStatus, Payment, Refund
from orders.selectors import order_tax_lines
from orders.services.holds import give_back_holds
from orders.services.refunds import request_refund
from orders.services.slots import release_pending_slots
from orders.transitions import move_orders, move_payment
from outbox.services import record_event
from shop.established import account_established_changed

logger = logging.getLogger(__name__)

# The webhook's `status`: "succeeded" is a payment authorized and captured at once
# (a provider without a separate capture; simulate_payment).
AUTHORIZED, CAPTURED, SUCCEEDED, FAILED = "authorized", "captured", "succeeded", "failed"


@dataclass(frozen=True)
class PaymentResult:
    payment: Payment
    redelivered: bool


@transaction.atomic
def handle_payment_webhook(
    *,
    payment_id: str,
    order_id: int,
    amount: int,
    currency: str,
    status: str,
    raw_body: str,
    held_since: datetime | None = None,
) -> PaymentResult:
    """Apply one provider callback exactly once, and in order.

    The payment row is inserted first (unique provider id): a redelivery, even
    a concurrent one, finds it and does nothing, except that a capture the
    provider made on its own moves an AUTHORIZED payment to CAPTURED, and a
    payment that failed and then succeeded under the same id (a provider that
    keeps the id across a retry) is applied as new. A capture told before its
    authorization is the payment, authorized and captured; the authorization
    told after it finds the payment and changes nothing. A payment that holds
    money moves the order PENDING_PAYMENT -> PAID with one conditional UPDATE,
    so it and the expiry job cannot both win. When the order is not pending any
    more (expired, cancelled, already paid) or the money does not match, an
    authorization is voided (with a manual capture: no money moved) and a
    capture is refunded, and the order is left as it is.

    `held_since`: when the provider says it authorized (a delivery may come
    days later); the hold's end is counted from it (PAYMENT_AUTHORIZATION_DAYS).
    """
    now = timezone.now()
    held = min(held_since or now, now)
    order = Order.objects.filter(id=order_id).first() if order_id < 2**63 else None
    captured = status in (CAPTURED, SUCCEEDED)
    payment = Payment(
        provider_payment_id=payment_id,
        order=order,
        amount=amount,
        currency=currency,
        captured_amount=amount if captured else 0,
        status=Payment.Status.CAPTURED if captured else Payment.Status(status),
        outcome=Payment.Outcome.FAILED,
        received_at=now,
        authorized_at=None if status == FAILED else held,
        authorization_ends_at=None if status == FAILED else authorization_ends(held),
        captured_at=now if captured else None,
        raw_body=raw_body,
    )
    if insert_unless_exists(payment, conflict_fields=["provider_payment_id"]) is None:
        known = _lock_known(payment_id, order)
        if known.status == Payment.Status.FAILED and status != FAILED:
            # Failed, then succeeded under the same id: the payment as if told now (for the order it names now).
            Payment.objects.filter(id=known.id).update(
                status=payment.status,
                authorized_at=held,
                authorization_ends_at=authorization_ends(held),
                captured_at=payment.captured_at,
                amount=amount,
                captured_amount=payment.captured_amount,
                currency=currency,
                received_at=now,
                raw_body=raw_body,
                order=order,
            )
            payment.id = known.id
            return _apply(payment, order, captured=captured, now=now)
        if captured:
            _captured_by_the_provider(known, amount=amount, now=now)
            known.refresh_from_db()
        return PaymentResult(known, redelivered=True)
    if status == FAILED:
        transaction.on_commit(lambda: PAYMENTS.labels("failed").inc())
        return PaymentResult(payment, redelivered=False)  # the order waits for another try or expiry
    return _apply(payment, order, captured=captured, now=now)


def authorization_ends(authorized_at: datetime) -> datetime:
    """When money authorized then is released by the card issuer unless captured."""
    return authorized_at + timedelta(days=settings.PAYMENT_AUTHORIZATION_DAYS)


def _lock_known(payment_id: str, order: Order | None) -> Payment:
    """A payment the shop knows, locked after its order and the order the
    webhook names (core/locks.py): a refund or a removal of lines, which lock
    the order first, cannot deadlock with this."""
    known_order = Payment.objects.filter(provider_payment_id=payment_id).values_list("order_id", flat=True).get()
    lock_orders({known_order, order.id if order else None} - {None})
    known = Payment.objects.filter(provider_payment_id=payment_id).select_related("order")
    return for_update(known, of=("self",)).get()


def _apply(payment: Payment, order: Order | None, *, captured: bool, now) -> PaymentResult:
    """A payment holding money, new to the shop: it pays its order, or is voided
    (authorized) or refunded (captured). Locks as core/locks.py declares: the
    order (its move), the payment, then the shopper's counter and holds."""
    refused = None
    if order is None:
        refused = Refund.Reason.UNKNOWN_ORDER
    elif (payment.amount, payment.currency) != (order.total_amount, order.currency):
        refused = Refund.Reason.AMOUNT_MISMATCH
    elif not move_orders([order.id], OrderStatus.PAID, at=now):
        refused = Refund.Reason.ORDER_NOT_PENDING

    if refused is None:
        payment.outcome = Payment.Outcome.APPLIED
    else:
        payment.outcome = Payment.Outcome.REFUNDED if captured else Payment.Outcome.VOIDED
    Payment.objects.filter(id=payment.id).update(outcome=payment.outcome)
    if refused is None:
        release_pending_slots(customer_ids=[order.customer_id])
        give_back_holds(order_ids=[order.id])
        _announce_paid(order=order, payment=payment, paid_at=now)
        if order.hold_address:  # placed while counted per address: paid, its shopper may now be established
            transaction.on_commit(lambda: account_established_changed(order.customer_id))
    _announce_authorized(payment, applied=refused is None, reason=refused)
    if captured:
        _announce_captured(payment, captured_at=now)
        if refused:
            request_refund(payment=payment, order=order, reason=refused)
    transaction.on_commit(lambda: PAYMENTS.labels(payment.outcome).inc())
    return PaymentResult(payment, redelivered=False)


def _captured_by_the_provider(known: Payment, *, amount: int, now) -> None:
    """The provider's `captured` for a payment the shop knows (an automatic
    capture): AUTHORIZED -> CAPTURED. Money it took for no order goes back; so
    does money it took after the shop had claimed a void (its capture won at the
    provider: the void will be refused there), which staff see in the log; and
    so does what it took beyond what the order costs now (lines removed before
    the capture), at once. `amount` is what the provider says it took (never
    past the authorization): the whole of it on its own, or the shop's own
    capture (CAPTURING) confirmed before the shop marked it."""
    taken = min(amount, known.amount)
    if move_payment(known.id, Payment.Status.CAPTURED, at=now, captured_amount=taken):
        known.captured_amount = taken
        _announce_captured(known, captured_at=now)
        if known.outcome == Payment.Outcome.VOIDED:  # it paid no order
            Payment.objects.filter(id=known.id).update(outcome=Payment.Outcome.REFUNDED)
            request_refund(payment=known, order=known.order, reason=Refund.Reason.ORDER_NOT_PENDING)
        elif excess := money.excess_captured(known):
            request_refund(payment=known, order=known.order, reason=Refund.Reason.EXCESS_CAPTURE, amount=excess)
    elif known.status in (Payment.Status.VOIDING, Payment.Status.VOIDED) and not known.captured_amount:
        logger.error(
            "payment %s captured by the provider after the shop claimed a void: refunded", known.provider_payment_id
        )
        # The money is taken after all: counted as captured, so that its refund claims it.
        Payment.objects.filter(id=known.id).update(captured_amount=taken)
        known.captured_amount = taken
        reason = Refund.Reason.ORDER_NOT_PENDING if known.outcome != Payment.Outcome.APPLIED else Refund.Reason.STAFF
        request_refund(payment=known, order=known.order, reason=reason)


def capture_payment(*, payment: Payment) -> bool:
    """Take an authorized payment's money: claimed (AUTHORIZED -> CAPTURING, one
    conditional UPDATE, which a void racing it cannot also win), asked of the
    provider under the payment's capture key, then CAPTURED with
    PaymentCaptured. A claim found made (a retry after the provider was down)
    is taken up again; the provider answers a repeated key as the first time.
    Whether this call captured it. ProviderUnavailable: the same call later."""
    return _settle(payment, claim=Payment.Status.CAPTURING, done=Payment.Status.CAPTURED)


def void_payment(*, payment: Payment) -> bool:
    """Release an authorized payment's money, as capture_payment takes it:
    AUTHORIZED -> VOIDING, the provider's void, VOIDED with PaymentVoided."""
    return _settle(payment, claim=Payment.Status.VOIDING, done=Payment.Status.VOIDED)


def _settle(payment: Payment, *, claim: str, done: str) -> bool:
    if not move_payment(payment.id, claim) and Payment.objects.get(id=payment.id).status != claim:
        return False  # settled, or claimed the other way
    amount = money.amount_to_capture(payment)
    if done == Payment.Status.CAPTURED:
        try:
            provider.capture(
                idempotency_key=f"capture-{payment.id}",
                payment_id=payment.provider_payment_id,
                amount=amount,
                currency=payment.currency,
            )
        except provider.ProviderRefused:
            move_payment(payment.id, Payment.Status.AUTHORIZED)  # the claim released: the money is still only held
            raise
    else:
        provider.void(idempotency_key=f"void-{payment.id}", payment_id=payment.provider_payment_id)
    now = timezone.now()
    with transaction.atomic():
        taken = {"captured_amount": amount} if done == Payment.Status.CAPTURED else {}
        if not move_payment(payment.id, done, at=now, **taken):
            return False  # a concurrent retry of the same claim marked it
        if done == Payment.Status.CAPTURED:
            payment.captured_amount = amount
            _announce_captured(payment, captured_at=now)
        else:
            _announce_voided(payment, voided_at=now)
    return True


def _payment_data(payment: Payment) -> dict:
    return {
        "order_id": payment.order_id,
        "payment_id": payment.provider_payment_id,
        "amount": payment.amount,
        "captured_amount": payment.captured_amount,
        "currency": payment.currency,
    }


def _announce(payment: Payment, event_type: str, data: dict) -> None:
    aggregate = ("order", payment.order_id) if payment.order_id else ("payment", payment.provider_payment_id)
    record_event(
        aggregate_type=aggregate[0],
        aggregate_id=aggregate[1],
        event_type=event_type,
        data={**_payment_data(payment), **data},
    )


def _announce_authorized(payment: Payment, *, applied: bool, reason: str | None) -> None:
    """PaymentAuthorized; `applied` false: the payment paid no order (`reason`),
    and the `payments` consumer voids it unless it was captured (then refunded)."""
    _announce(
        payment,
        "PaymentAuthorized",
        {"applied": applied, "reason": reason or "", "authorized_at": payment.received_at.isoformat()},
    )


def _announce_captured(payment: Payment, *, captured_at) -> None:
    _announce(payment, "PaymentCaptured", {"captured_at": captured_at.isoformat()})


def _announce_voided(payment: Payment, *, voided_at) -> None:
    _announce(payment, "PaymentVoided", {"voided_at": voided_at.isoformat()})


def _announce_paid(*, order: Order, payment: Payment, paid_at) -> None:
    fields = ("sku", "name", "quantity", "unit_price", "discount", "tax_rate", "tax", "gross")
    items = [dict(zip(fields, row, strict=True)) for row in order.items.values_list("product_id", *fields[1:])]
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
            "items": [{**item, "net": item["gross"] - item["tax"]} for item in items],
            "shipping": order.shipping,
            "tax": order.tax_amount,
            "tax_lines": order_tax_lines(order),
            "tax_country": order.tax_country,
            "prices_include_tax": order.prices_include_tax,
            "shipping_address": order.shipping_address,
        },
    )
