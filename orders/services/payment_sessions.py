"""Payments the shop starts: a session at the provider per order, where the
shopper pays (POST /api/orders/{id}/payment). The outcome comes back through the
signed webhook (orders/services/payments.py)."""

import logging
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from core.db import insert_unless_exists
from orders import provider
from orders.exceptions import OrderNotFound, OrderNotPayable, PaymentProviderUnavailable
from orders.models import Order, OrderStatus, Payment, PaymentSession
from orders.services.payments import handle_payment_webhook
from orders.services.queue_admission import QUEUED, queued_or_written_order

logger = logging.getLogger(__name__)


def start_payment(*, customer_id: int, order_id: int) -> tuple[PaymentSession, bool]:
    """The order's open payment session, or a new one: (session, created).

    OrderNotFound for someone else's order; OrderNotPayable unless it awaits
    payment before its deadline (a queued order not written yet cannot be paid).
    Concurrent calls for one order get one session: they all find the same
    attempt (a new attempt is a row `(order, attempt)` that only one INSERT
    makes) and ask the provider under that attempt's idempotency key, which
    answers them all with the same session. The session closes no later than
    the order's payment deadline. The provider down: PaymentProviderUnavailable
    (503), and the next call asks again under the same key."""
    order = queued_or_written_order(customer_id=customer_id, order_id=order_id)
    if order is None:
        raise OrderNotFound()
    now = timezone.now()
    if order.status == QUEUED or order.status != OrderStatus.PENDING_PAYMENT or order.expires_at <= now:
        raise OrderNotPayable(order_id=order.id, status=order.status)
    if order.total_amount == 0:
        _pay_nothing(order)
        raise OrderNotPayable("Nothing to pay: the order is paid.", order_id=order.id, status=OrderStatus.PAID)
    latest = order.payment_sessions.order_by("-attempt").first()
    if latest is not None and latest.expires_at > now and not _spent_since(latest):
        session, created = latest, False
    else:
        session, created = _new_session(order, now, attempt=latest.attempt + 1 if latest else 1)
    if not session.provider_session_id:
        _ask_provider(session)
    return session, created


def _spent_since(session: PaymentSession) -> bool:
    """Whether a payment of the session's order failed since it opened (the
    shopper declined, the card was refused) or paid and then lapsed (staff asked
    for the order to be paid again): the next call starts a new attempt."""
    return Payment.objects.filter(
        order_id=session.order_id,
        status__in=[Payment.Status.FAILED, Payment.Status.LAPSED],
        received_at__gte=session.created_at,
    ).exists()


def _pay_nothing(order: Order) -> None:
    """An order a discount made free is paid without the provider: a payment of
    0, captured, applied as any payment (the order PAID, its events)."""
    handle_payment_webhook(
        payment_id=f"free-{order.id}",
        order_id=order.id,
        amount=0,
        currency=order.currency,
        status="succeeded",
        raw_body="{}",
    )


def _new_session(order: Order, now, *, attempt: int) -> tuple[PaymentSession, bool]:
    """The attempt's row: made by this call, or by a concurrent one that read the
    same latest attempt (the unique (order, attempt) decides; no savepoint)."""
    expires_at = min(now + timedelta(seconds=settings.PAYMENT_SESSION_SECONDS), order.expires_at)
    row = PaymentSession(
        order=order, attempt=attempt, amount=order.total_amount, currency=order.currency, expires_at=expires_at
    )
    if insert_unless_exists(row, conflict_fields=["order", "attempt"]) is not None:
        return row, True
    return PaymentSession.objects.get(order=order, attempt=attempt), False


def _ask_provider(session: PaymentSession) -> None:
    """The provider's session for this attempt (the same answer however often
    asked: its idempotency key), kept on the row."""
    capture = "manual" if settings.PAYMENT_CAPTURE == "on_shipment" else "automatic"
    try:
        answer = provider.create_session(
            idempotency_key=session.idempotency_key,
            order_id=session.order_id,
            amount=session.amount,
            currency=session.currency,
            expires_at=session.expires_at.isoformat(),
            capture=capture,
        )
    except provider.ProviderUnavailable as error:
        raise PaymentProviderUnavailable() from error
    except ImproperlyConfigured as error:  # no PAYMENT_PROVIDER_URL: the operator's to fix, not a 500
        logger.error("payment session not started: %s", error)
        raise PaymentProviderUnavailable() from error
    except provider.ProviderRefused as error:  # the provider will not take this payment as it is
        logger.error("payment session for order %s refused: %s", session.order_id, error)
        raise PaymentProviderUnavailable("The payment provider refused this payment; contact us.") from error
    session.provider_session_id, session.pay_url = answer["id"], answer["pay_url"]
    PaymentSession.objects.filter(pk=session.pk, provider_session_id="").update(
        provider_session_id=session.provider_session_id, pay_url=session.pay_url
    )
