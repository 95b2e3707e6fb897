"""Money held on a card ends: an issuer keeps an authorization for a limited time
(PAYMENT_AUTHORIZATION_DAYS; Stripe: 7 days for most cards), after which a
capture is refused and nothing can be taken. The shop ships only what it has
captured (orders/services/shipping.py), so a lapse never lets goods leave
unpaid; this module keeps it from happening, and says so when it does:

- `capture_ending_authorizations` (beat, hourly): a paid order not shipped whose
  hold ends within a day is listed for order managers (one e-mail per payment)
  and, with PAYMENT_CAPTURE_BEFORE_EXPIRY, captured now. The order stays PAID and
  unshipped; cancelling it later refunds the money instead of voiding it.
- `authorization_lapsed`: the provider says the hold ended (a capture refused for
  it, or its own notice): the payment LAPSED, the order PAYMENT_LAPSED, the event
  OrderPaymentLapsed. Staff then ask the shopper to pay again
  (`request_payment_again`) or cancel the order (its stock goes back on sale)."""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from orders.exceptions import OrderNotFound, OrderNotPayable
from orders.locks import lock_orders
from orders.models import Order, OrderStatus, Payment
from orders.provider_errors import AuthorizationLapsed, ProviderRefused, ProviderUnavailable
from orders.services.payments import capture_payment
from orders.services.slots import count_pending_orders
from orders.transitions import move_orders, move_payment
from outbox.services import record_event

logger = logging.getLogger(__name__)

WARN_BEFORE = timedelta(days=1)


def authorizations_ending(*, now: datetime, within: timedelta = WARN_BEFORE) -> QuerySet[Payment]:
    """Payments holding the money of a paid, unshipped order whose hold ends
    before `now + within` (soonest first); a capture claimed and not answered
    (the provider was down) included: it is asked again under its key."""
    return (
        Payment.objects.filter(
            outcome=Payment.Outcome.APPLIED,
            status__in=[Payment.Status.AUTHORIZED, Payment.Status.CAPTURING],
            order__status=OrderStatus.PAID,
            authorization_ends_at__lte=now + within,
        )
        .select_related("order")
        .order_by("authorization_ends_at")
    )


@dataclass
class EndingRun:
    """What one run of capture_ending_authorizations did, by order id."""

    captured: list[int] = field(default_factory=list)
    lapsed: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)  # the provider down, or capture off: the next run
    warned: list[int] = field(default_factory=list)


def capture_ending_authorizations(*, now: datetime | None = None) -> EndingRun:
    """Each order's capture on its own (one failing does not stop the others),
    then the managers' e-mail, which says what became of each."""
    now = now or timezone.now()
    run = EndingRun()
    ending = list(authorizations_ending(now=now))
    for payment in ending:
        if not settings.PAYMENT_CAPTURE_BEFORE_EXPIRY:
            run.waiting.append(payment.order_id)
            continue
        try:
            outcome = capture_for_order(payment)
        except Exception:
            logger.exception("capture of payment %s before its hold ends failed", payment.provider_payment_id)
            outcome = "waiting"
        getattr(run, outcome).append(payment.order_id)
    run.warned = _warn_order_managers(ending, run=run, now=now)
    if ending:
        logger.info("authorizations ending within a day: %s", run)
    return run


def capture_for_order(payment: Payment) -> str:
    """Capture the payment of its order, as shipping and the hourly job do:
    "captured", "lapsed" (the hold had ended: the order is PAYMENT_LAPSED now),
    "refused" (another reason, on the order's timeline) or "waiting" (the
    provider is down: nothing changed, try later)."""
    try:
        captured = capture_payment(payment=payment)
    except AuthorizationLapsed as lapsed:
        authorization_lapsed(payment_id=payment.provider_payment_id, reason=str(lapsed))
        return "lapsed"
    except ProviderRefused as refused:
        record_capture_refused(payment, reason=str(refused))
        return "refused"
    except ProviderUnavailable:
        return "waiting"
    if captured:
        return "captured"
    # Settled meanwhile by someone else: a capture is as good as this one; a void or a lapse is not.
    status = Payment.objects.filter(id=payment.id).values_list("status", flat=True).get()
    return "captured" if status in (Payment.Status.CAPTURED, Payment.Status.REFUNDED) else "refused"


def record_capture_refused(payment: Payment, *, reason: str) -> None:
    """A capture the provider refused for a reason other than a lapse: the order
    stays PAID, and its timeline (the admin's order page) says why."""
    logger.warning("capture of payment %s refused: %s", payment.provider_payment_id, reason)
    record_event(
        aggregate_type="order",
        aggregate_id=payment.order_id,
        event_type="PaymentCaptureRefused",
        data={"order_id": payment.order_id, "payment_id": payment.provider_payment_id, "reason": reason[:500]},
    )


@transaction.atomic
def authorization_lapsed(*, payment_id: str, reason: str = "the authorization ended") -> bool:
    """The provider's word that a payment's hold ended before it was captured:
    the payment LAPSED and, when it paid an order not shipped, the order
    PAYMENT_LAPSED with OrderPaymentLapsed. Whether this call moved it (a
    redelivered notice, or one for a payment captured or voided meanwhile,
    changes nothing)."""
    known = Payment.objects.filter(provider_payment_id=payment_id).values_list("order_id", flat=True).first()
    if known is None:
        logger.info("lapse of unknown payment %s ignored", payment_id)
        return False
    lock_orders({known})
    payment = Payment.objects.get(provider_payment_id=payment_id)
    if not move_payment(payment.id, Payment.Status.LAPSED):
        return False
    applied = payment.outcome == Payment.Outcome.APPLIED
    moved = applied and move_orders([payment.order_id], OrderStatus.PAYMENT_LAPSED)
    if moved:  # it no longer pays the order, which may be paid again
        Payment.objects.filter(id=payment.id).update(outcome=Payment.Outcome.LAPSED)
    elif applied:  # an order shipped before shipping captured first: its money is gone, staff must know
        logger.error("payment %s of order %s lapsed uncaptured (%s)", payment_id, payment.order_id, reason)
    else:
        logger.info("payment %s that paid no order lapsed (%s)", payment_id, reason)
    if applied:
        record_event(
            aggregate_type="order",
            aggregate_id=payment.order_id,
            event_type="OrderPaymentLapsed",
            data={
                "order_id": payment.order_id,
                "payment_id": payment_id,
                "amount": payment.amount,
                "currency": payment.currency,
                "reason": reason[:500],
                "lapsed_at": timezone.now().isoformat(),
                "order_moved": bool(moved),
            },
        )
    return bool(moved)


@transaction.atomic
def request_payment_again(*, order_id: int, now: datetime | None = None) -> Order:
    """Staff ask the shopper to pay a PAYMENT_LAPSED order again: it awaits payment
    for ORDER_PAYMENT_TIMEOUT_SECONDS (its units still reserved), then expires as
    any unpaid order. OrderPaymentRequested tells the shopper."""
    now = now or timezone.now()
    order = Order.objects.filter(id=order_id).first()
    if order is None:
        raise OrderNotFound()
    expires_at = now + timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS)
    # Its units are reserved already: it takes no unpaid holds (orders/services/holds.py) this time.
    moved = Order.objects.filter(id=order_id, status=OrderStatus.PAYMENT_LAPSED).update(
        status=OrderStatus.PENDING_PAYMENT, expires_at=expires_at, holds_units=False
    )
    if not moved:
        raise OrderNotPayable(
            "Only an order whose payment lapsed can be paid again.", order_id=order_id, status=order.status
        )
    count_pending_orders(customer_ids=[order.customer_id])  # it holds a pending slot again until paid or expired
    record_event(
        aggregate_type="order",
        aggregate_id=order_id,
        event_type="OrderPaymentRequested",
        data={
            "order_id": order_id,
            "customer_id": order.customer_id,
            "total": order.total_amount,
            "currency": order.currency,
            "expires_at": expires_at.isoformat(),
        },
    )
    order.refresh_from_db()
    return order


def _warn_order_managers(ending: list[Payment], *, run: EndingRun, now: datetime) -> list[int]:
    """One e-mail to the order managers (staff who may change orders, with an
    address) listing the payments not warned of before and what this run did;
    each is warned once (a conditional UPDATE of its stamp, so two runs at once
    do not both send). A mail that cannot be sent gives the stamps back."""
    fresh = [
        payment
        for payment in ending
        if Payment.objects.filter(id=payment.id, authorization_warned_at__isnull=True).update(
            authorization_warned_at=now
        )
    ]
    if not fresh:
        return []
    managers = [
        user.email
        for user in get_user_model().objects.with_perm("orders.change_order", include_superusers=True)
        if user.email and user.is_active
    ]
    done = {
        order_id: outcome
        for outcome in ("captured", "lapsed", "refused", "waiting")
        for order_id in getattr(run, outcome)
    }
    said = {
        "captured": "captured now",
        "lapsed": "LAPSED already: ask the shopper to pay again, or cancel",
        "refused": "capture REFUSED: see the order's timeline",
        "waiting": "not captured (PAYMENT_CAPTURE_BEFORE_EXPIRY off, or the provider down): ship or capture it",
    }
    lines = [
        f"  order {payment.order_id}: {payment.provider_payment_id}, "
        f"held until {payment.authorization_ends_at:%Y-%m-%d %H:%M} UTC: {said[done[payment.order_id]]}"
        for payment in fresh
    ]
    if managers:
        try:
            send_mail(
                f"{len(fresh)} paid order(s) not shipped: card authorizations end within a day",
                "The money held for these orders is released by the card issuer soon:\n\n" + "\n".join(lines) + "\n",
                settings.DEFAULT_FROM_EMAIL,
                managers,
            )
        except Exception:
            logger.exception("order managers could not be told of %d authorizations ending", len(fresh))
            Payment.objects.filter(id__in=[payment.id for payment in fresh]).update(authorization_warned_at=None)
            return []
    return [payment.order_id for payment in fresh]
