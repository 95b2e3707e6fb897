"""orders/services/payments.py, the webhook (orders/payment_apis.py) and its signatures:
a payment applies once, and whatever cannot pay a pending order is refunded."""

import json
import time

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from inventory.models import Stock
from orders.models import Order, OrderStatus, Payment, Refund
from outbox.models import OutboxEvent
from tests.factories import UserFactory, product_with_stock
from tests.helpers import expire_now, place_pending_order, post_webhook, run_in_threads, shopper_client

pytestmark = pytest.mark.django_db


def events(event_type):
    return list(OutboxEvent.objects.filter(event_type=event_type))


def stock():
    s = Stock.objects.get(product_id="A")
    return s.available, s.reserved


def test_webhook_success_pays_the_order_once(client, order):
    response = post_webhook(client, payment_id="pay_1", order_id=order.id, amount=500)
    assert response.status_code == 200
    assert response.json() == {"payment_id": "pay_1", "outcome": "applied", "redelivered": False}
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID and order.paid_at is not None
    [paid] = events("OrderPaid")
    assert paid.payload["order_id"] == order.id and paid.payload["total"] == 500
    assert paid.payload["items"] == [
        {
            "sku": "A",
            "name": order.items.get().name,
            "quantity": 2,
            "unit_price": 250,
            "discount": 0,
            "tax_rate": 0,
            "tax": 0,
            "gross": 500,
            "net": 500,
        }
    ]
    assert stock() == (8, 2)  # still reserved until shipped


def test_webhook_redelivery_has_no_second_effect(client, order):
    for _ in range(3):
        assert post_webhook(client, payment_id="pay_1", order_id=order.id, amount=500).status_code == 200
    assert Payment.objects.count() == 1
    assert len(events("OrderPaid")) == 1
    assert not Refund.objects.exists()


@pytest.mark.parametrize(
    "tamper",
    ["wrong_secret", "tampered_body", "old_timestamp", "future_timestamp", "missing", "garbage"],
)
def test_webhook_bad_signature_is_401_and_records_nothing(client, order, tamper):
    body = json.dumps(
        {"payment_id": "pay_1", "order_id": order.id, "amount": 500, "currency": "EUR", "status": "succeeded"}
    ).encode()
    from orders.signatures import TOLERANCE_SECONDS, sign

    # Past the window by a margin: a slow run that crosses a second between signing and
    # checking must not bring a +301 s stamp back inside the 300 s tolerance.
    now = int(time.time())
    outside = TOLERANCE_SECONDS + 60
    headers = {
        "wrong_secret": sign(body=body, secret="not-the-secret"),
        "tampered_body": sign(body=body.replace(b"500", b"5"), secret=settings.PAYMENT_WEBHOOK_SECRET),
        "old_timestamp": sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET, timestamp=now - outside),
        "future_timestamp": sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET, timestamp=now + outside),
        "missing": None,
        "garbage": "v1=abc,t=notanumber",
    }
    extra = {"HTTP_PAYMENT_SIGNATURE": headers[tamper]} if headers[tamper] else {}
    response = client.post("/api/payments/webhook", body, content_type="application/json", **extra)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert not Payment.objects.exists()
    assert Order.objects.get().status == OrderStatus.PENDING_PAYMENT


@pytest.mark.parametrize("offset", [-300, 300, -301, 301])
def test_signature_window_edge_is_exactly_the_tolerance(offset):
    """At a fixed `now`: a stamp TOLERANCE_SECONDS away is accepted, one second more is not."""
    from orders.exceptions import InvalidSignature
    from orders.signatures import TOLERANCE_SECONDS, sign, verify_signature

    now, body, secret = 1_800_000_000, b'{"x": 1}', "s3cret"
    header = sign(body=body, secret=secret, timestamp=now + offset)
    if abs(offset) <= TOLERANCE_SECONDS:
        verify_signature(header=header, body=body, secret=secret, now=now)
    else:
        with pytest.raises(InvalidSignature):
            verify_signature(header=header, body=body, secret=secret, now=now)


@pytest.mark.parametrize(
    "payload",
    [
        {"payment_id": "p", "order_id": "1", "amount": 500, "currency": "EUR", "status": "succeeded"},
        {"payment_id": "p", "order_id": 1, "amount": 5.5, "currency": "EUR", "status": "succeeded"},
        {"payment_id": "p", "order_id": 1, "amount": 500, "currency": "eur", "status": "succeeded"},
        {"payment_id": "p", "order_id": 1, "amount": 500, "currency": "EUR", "status": "maybe"},
        {"payment_id": "", "order_id": 1, "amount": 500, "currency": "EUR", "status": "succeeded"},
        {"order_id": 1},
    ],
)
def test_webhook_malformed_body_is_400(client, order, payload):
    from orders.signatures import sign

    body = json.dumps(payload).encode()
    response = client.post(
        "/api/payments/webhook",
        body,
        content_type="application/json",
        HTTP_PAYMENT_SIGNATURE=sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET),
    )
    assert response.status_code == 400
    assert not Payment.objects.exists()


def test_webhook_failed_payment_is_recorded_and_order_stays_pending(client, order):
    response = post_webhook(client, payment_id="pay_f", order_id=order.id, amount=500, status="failed")
    assert response.status_code == 200
    assert Payment.objects.get().outcome == "failed"
    assert Order.objects.get().status == OrderStatus.PENDING_PAYMENT
    assert not Refund.objects.exists()


@pytest.mark.parametrize(("amount", "currency"), [(499, "EUR"), (500, "USD")])
def test_webhook_amount_mismatch_is_refunded(client, order, amount, currency):
    response = post_webhook(client, payment_id="pay_x", order_id=order.id, amount=amount, currency=currency)
    assert response.status_code == 200
    assert response.json()["outcome"] == "refunded"
    assert Refund.objects.get().reason == Refund.Reason.AMOUNT_MISMATCH
    assert Order.objects.get().status == OrderStatus.PENDING_PAYMENT
    assert len(events("RefundRequested")) == 1


def test_webhook_for_expired_order_is_refunded_never_resurrects(client, order):
    expire_now(order)
    call_command("expire_orders")
    assert stock() == (10, 0)
    response = post_webhook(client, payment_id="late", order_id=order.id, amount=500)
    assert response.status_code == 200
    assert response.json()["outcome"] == "refunded"
    assert Order.objects.get().status == OrderStatus.CANCELLED
    refund = Refund.objects.get()
    assert (refund.reason, refund.amount, refund.status) == (Refund.Reason.ORDER_NOT_PENDING, 500, "REQUESTED")
    assert stock() == (10, 0)
    assert len(events("RefundRequested")) == 1 and not events("OrderPaid")


def test_webhook_second_payment_of_a_paid_order_is_refunded(client, order):
    post_webhook(client, payment_id="first", order_id=order.id, amount=500)
    response = post_webhook(client, payment_id="second", order_id=order.id, amount=500)
    assert response.json()["outcome"] == "refunded"
    assert Refund.objects.get().payment.provider_payment_id == "second"
    assert len(events("OrderPaid")) == 1


def test_webhook_unknown_order_is_recorded_as_orphan_and_refunded(client, db):
    response = post_webhook(client, payment_id="orphan", order_id=987654, amount=100)
    assert response.status_code == 200
    payment = Payment.objects.get()
    assert payment.order is None and json.loads(payment.raw_body)["order_id"] == 987654
    assert Refund.objects.get().reason == Refund.Reason.UNKNOWN_ORDER
    [event] = events("RefundRequested")
    assert event.payload["order_id"] is None and event.payload["payment_id"] == "orphan"


def test_late_payment_after_shopper_cancel_is_refunded(client, order):
    shopper = shopper_client(order.customer)
    response = shopper.post(f"/api/orders/{order.id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "CANCELLED"
    assert stock() == (10, 0)
    assert post_webhook(client, payment_id="late", order_id=order.id, amount=500).json()["outcome"] == "refunded"
    assert Order.objects.get().status == OrderStatus.CANCELLED


def test_simulate_payment_local_pays_the_order(order, capsys):
    call_command("simulate_payment", str(order.id), "--local")
    assert Order.objects.get().status == OrderStatus.PAID
    assert "-> 200" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_webhook_redelivered_5_times_concurrently_has_one_effect(redis):
    product_with_stock(sku="A", price=250, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    statuses = run_in_threads(
        [lambda: post_webhook(Client(), payment_id="dup", order_id=order.id, amount=500).status_code] * 5
    )
    assert statuses == [200] * 5
    assert Payment.objects.count() == 1
    assert len(events("OrderPaid")) == 1
    assert Order.objects.get().status == OrderStatus.PAID
