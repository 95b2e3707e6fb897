"""orders/services/cancellation.py: unpaid orders expire in bounded batches and give
their stock back once, a shopper cancels only their own pending order, and a payment
racing the expiry job leaves each order either paid or cancelled."""

import pytest
from django.test import Client

from inventory.models import Stock
from orders.models import Order, OrderStatus, Refund
from outbox.models import OutboxEvent
from tests.factories import UserFactory, product_with_stock
from tests.helpers import expire_now, place_pending_order, post_webhook, shopper_client

pytestmark = pytest.mark.django_db


def events(event_type):
    return list(OutboxEvent.objects.filter(event_type=event_type))


def stock():
    s = Stock.objects.get(product_id="A")
    return s.available, s.reserved


def test_shopper_cancel_rules(client, order):
    stranger = shopper_client()
    assert stranger.post(f"/api/orders/{order.id}/cancel").status_code == 404
    post_webhook(client, payment_id="p", order_id=order.id, amount=500)
    owner = shopper_client(order.customer)
    response = owner.post(f"/api/orders/{order.id}/cancel")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "order_not_cancellable"
    assert Order.objects.get().status == OrderStatus.PAID


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
        place_pending_order(redis, user, {"A": 1 + i % 2, ["B", "C"][i % 2]: 1 + i % 3}) for i, user in enumerate(users)
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
