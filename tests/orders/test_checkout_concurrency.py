"""Real threads, each with its own PostgreSQL connection, racing for stock."""

import random

import pytest
from django.db.models import Sum

from inventory.models import Stock
from orders.models import Order, OrderItem
from outbox.models import OutboxEvent
from tests.factories import UserFactory, product_with_stock
from tests.orders.conftest import checkout, fill_cart, run_in_threads, shopper_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def buyers(redis, count, cart_for):
    clients = []
    for i in range(count):
        client = shopper_client(UserFactory())
        fill_cart(redis, client.user.id, cart_for(i))
        clients.append(client)
    return clients


def test_checkout_never_oversells_stock_5_buyers_20(redis):
    product_with_stock(sku="HOT", available=5)
    clients = buyers(redis, 20, lambda i: {"HOT": 1})
    statuses = run_in_threads([lambda c=c: checkout(c).status_code for c in clients])
    assert sorted(statuses) == [201] * 5 + [409] * 15
    stock = Stock.objects.get(product_id="HOT")
    assert (stock.available, stock.reserved) == (0, 5)
    assert Order.objects.count() == 5
    assert OutboxEvent.objects.filter(event_type="OrderCreated").count() == 5


def test_checkout_never_oversells_with_mixed_quantities(redis):
    product_with_stock(sku="HOT", available=40)
    rng = random.Random(7)
    quantities = [rng.randint(1, 3) for _ in range(50)]
    clients = buyers(redis, 50, lambda i: {"HOT": quantities[i]})
    statuses = run_in_threads([lambda c=c: checkout(c).status_code for c in clients])
    assert set(statuses) <= {201, 409}
    stock = Stock.objects.get(product_id="HOT")
    sold = OrderItem.objects.aggregate(total=Sum("quantity"))["total"]
    assert stock.available >= 0 and stock.reserved >= 0
    assert stock.reserved == sold == 40 - stock.available
    assert sum(q for q, s in zip(quantities, statuses, strict=True) if s == 201) == sold
    assert stock.available < 3  # demand (~100 units) outran the 40: the sale ran dry
    assert min(q for q, s in zip(quantities, statuses, strict=True) if s == 409) > stock.available


def test_checkout_has_no_deadlock_between_opposite_carts(redis):
    product_with_stock(sku="A", available=40)
    product_with_stock(sku="B", available=40)
    # Insert the hash fields in opposite orders; the service must sort them anyway.
    clients = buyers(redis, 60, lambda i: {"A": 1, "B": 1} if i % 2 else {"B": 1, "A": 1})
    responses = run_in_threads([lambda c=c: checkout(c) for c in clients])
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {201, 409}, [r.json() for r in responses if r.status_code not in (201, 409)]
    assert statuses.count(201) == 40
    stocks = {s.product_id: (s.available, s.reserved) for s in Stock.objects.all()}
    assert stocks == {"A": (0, 40), "B": (0, 40)}


def test_checkout_same_key_from_10_threads_makes_one_order(redis):
    product_with_stock(sku="A", available=100)
    user = UserFactory()
    fill_cart(redis, user.id, {"A": 2})
    clients = [shopper_client(user) for _ in range(10)]
    responses = run_in_threads([lambda c=c: checkout(c, key="double-click") for c in clients])
    assert Order.objects.count() == 1
    order = Order.objects.get()
    assert sorted(r.status_code for r in responses) == [200] * 9 + [201]
    assert {r.json()["id"] for r in responses} == {order.id}
    assert Stock.objects.get(product_id="A").reserved == 2
    assert OutboxEvent.objects.count() == 1
