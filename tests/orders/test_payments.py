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
from tests.orders.conftest import expire_now, place_pending_order, post_webhook, run_in_threads

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(redis):
    product_with_stock(sku="A", price=250, available=10)
    return place_pending_order(redis, UserFactory(), {"A": 2})


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
    assert paid.payload["items"] == [{"sku": "A", "name": order.items.get().name, "quantity": 2, "unit_price": 250}]
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
    from orders.signatures import sign

    now = int(time.time())
    headers = {
        "wrong_secret": sign(body=body, secret="not-the-secret"),
        "tampered_body": sign(body=body.replace(b"500", b"5"), secret=settings.PAYMENT_WEBHOOK_SECRET),
        "old_timestamp": sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET, timestamp=now - 301),
        "future_timestamp": sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET, timestamp=now + 301),
        "missing": None,
        "garbage": "v1=abc,t=notanumber",
    }
    extra = {"HTTP_PAYMENT_SIGNATURE": headers[tamper]} if headers[tamper] else {}
    response = client.post("/api/payments/webhook", body, content_type="application/json", **extra)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert not Payment.objects.exists()
    assert Order.objects.get().status == OrderStatus.PENDING_PAYMENT


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
    from tests.orders.conftest import shopper_client

    shopper = shopper_client(order.customer)
    response = shopper.post(f"/api/orders/{order.id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "CANCELLED"
    assert stock() == (10, 0)
    assert post_webhook(client, payment_id="late", order_id=order.id, amount=500).json()["outcome"] == "refunded"
    assert Order.objects.get().status == OrderStatus.CANCELLED


def test_shopper_cancel_rules(client, order):
    from tests.orders.conftest import shopper_client

    stranger = shopper_client()
    assert stranger.post(f"/api/orders/{order.id}/cancel").status_code == 404
    post_webhook(client, payment_id="p", order_id=order.id, amount=500)
    owner = shopper_client(order.customer)
    response = owner.post(f"/api/orders/{order.id}/cancel")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "order_not_cancellable"
    assert Order.objects.get().status == OrderStatus.PAID


def test_simulate_payment_local_pays_the_order(order, capsys):
    call_command("simulate_payment", str(order.id), "--local")
    assert Order.objects.get().status == OrderStatus.PAID
    assert "-> 200" in capsys.readouterr().out


def test_expiry_returns_stock_of_300_orders_of_one_sku_in_one_batch(redis):
    product_with_stock(sku="A", price=100, available=1000)
    users = UserFactory.create_batch(300)
    orders = [place_pending_order(redis, user, {"A": 1 + i % 3}) for i, user in enumerate(users)]
    reserved = sum(1 + i % 3 for i in range(300))
    assert stock() == (1000 - reserved, reserved)
    expire_now(*orders)
    from orders.services import expire_unpaid_orders

    assert expire_unpaid_orders(batch_size=500) == 300
    assert stock() == (1000, 0)
    assert Order.objects.filter(status=OrderStatus.CANCELLED).count() == 300
    assert len(events("OrderCancelled")) == 300
    assert expire_unpaid_orders() == 0  # nothing left, nothing returned twice
    assert stock() == (1000, 0)


def test_expiry_leaves_orders_that_have_not_expired(redis, order):
    from orders.services import expire_unpaid_orders

    assert expire_unpaid_orders() == 0
    assert Order.objects.get().status == OrderStatus.PENDING_PAYMENT


def test_expiry_works_in_bounded_batches(redis):
    product_with_stock(sku="A", available=100)
    orders = [place_pending_order(redis, UserFactory(), {"A": 1}) for _ in range(25)]
    expire_now(*orders)
    from orders.services import expire_unpaid_orders

    assert expire_unpaid_orders(batch_size=10) == 25
    assert stock() == (100, 0)


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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_payment_and_expiry_race_exactly_one_wins(redis):
    """200 expired orders; their payments and the expiry job run at once."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from orders.services import expire_unpaid_orders

    for sku in ("A", "B", "C"):
        product_with_stock(sku=sku, price=100, available=1000)
    users = UserFactory.create_batch(200)
    orders = [
        place_pending_order(redis, user, {"A": 1 + i % 2, ["B", "C"][i % 2]: 1 + i % 3})
        for i, user in enumerate(users)
    ]
    before = {s.product_id: s.available + s.reserved for s in Stock.objects.all()}
    expire_now(*orders)

    def pay(order):
        try:
            return post_webhook(Client(), payment_id=f"race-{order.id}", order_id=order.id, amount=order.total_amount)
        finally:
            connection.close()

    def expire():
        try:
            return expire_unpaid_orders(batch_size=1)  # small batches interleave with the payments
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=24) as pool:
        expiries = [pool.submit(expire) for _ in range(2)]
        payments = [pool.submit(pay, order) for order in orders]
        expiries += [pool.submit(expire) for _ in range(2)]
        assert all(f.result().status_code == 200 for f in payments)
        [f.result() for f in expiries]

    paid = set(Order.objects.filter(status=OrderStatus.PAID).values_list("id", flat=True))
    cancelled = set(Order.objects.filter(status=OrderStatus.CANCELLED).values_list("id", flat=True))
    assert paid | cancelled == {o.id for o in orders} and not paid & cancelled
    by_type = {}
    for event in OutboxEvent.objects.exclude(event_type="OrderCreated"):
        by_type.setdefault(event.event_type, []).append(int(event.payload["order_id"]))
    assert sorted(by_type.get("OrderPaid", [])) == sorted(paid)
    assert sorted(by_type.get("OrderCancelled", [])) == sorted(cancelled)
    assert sorted(by_type.get("RefundRequested", [])) == sorted(cancelled)
    assert set(Refund.objects.values_list("order_id", flat=True)) == cancelled

    from orders.models import OrderItem

    for sku, total in before.items():
        s = Stock.objects.get(product_id=sku)
        paid_items = OrderItem.objects.filter(order_id__in=paid, product_id=sku)
        paid_quantity = sum(paid_items.values_list("quantity", flat=True))
        assert s.reserved == paid_quantity
        assert s.available + s.reserved == total
