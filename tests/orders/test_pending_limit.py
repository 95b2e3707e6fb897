"""MAX_PENDING_ORDERS_PER_CUSTOMER: one account cannot hoard stock with unpaid orders."""

import pytest
from django.db.models import Count

from inventory.models import Stock
from orders.exceptions import TooManyPendingOrders
from orders.models import Order, OrderStatus, PendingOrderCount
from orders.services import cancel_customer_order, expire_unpaid_orders
from orders.services.checkout import _create_order
from tests.factories import UserFactory, product_with_stock
from tests.orders.conftest import (
    checkout,
    expire_now,
    fill_cart,
    post_webhook,
    run_in_threads,
    shopper_client,
)


def slots(customer) -> int:
    row = PendingOrderCount.objects.filter(customer=customer).first()
    return row.pending if row else 0


def assert_slots_match_the_orders() -> None:
    real = dict(
        Order.objects.filter(status=OrderStatus.PENDING_PAYMENT)
        .values_list("customer_id")
        .annotate(n=Count("id"))
        .values_list("customer_id", "n")
    )
    counted = {c: n for c, n in PendingOrderCount.objects.values_list("customer_id", "pending") if n}
    assert counted == real


@pytest.mark.django_db
def test_the_fourth_unpaid_order_is_refused_and_writes_nothing(redis, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 3
    product_with_stock(sku="MUG", price=100, available=50)
    client = shopper_client()
    for i in range(3):
        fill_cart(redis, client.user.id, {"MUG": 5})
        assert checkout(client, key=f"k{i}").status_code == 201
    fill_cart(redis, client.user.id, {"MUG": 5})
    response = checkout(client, key="k3")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "too_many_pending_orders",
        "message": "You have too many orders awaiting payment: pay or cancel one first.",
        "details": {"limit": 3},
    }
    assert Order.objects.count() == 3 and Stock.objects.get(product_id="MUG").available == 35
    assert slots(client.user) == 3
    assert checkout(client, key="k1").status_code == 200  # a replay at the limit still answers its order
    assert slots(client.user) == 3


@pytest.mark.django_db
def test_paying_cancelling_or_expiring_gives_the_slot_back(redis, settings, client):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 1
    product_with_stock(sku="MUG", price=100, available=50)
    shopper = shopper_client()

    def order(key):
        fill_cart(redis, shopper.user.id, {"MUG": 1})
        return checkout(shopper, key=key)

    first = order("a").json()
    assert order("b").status_code == 409
    assert post_webhook(client, payment_id="p1", order_id=first["id"], amount=100).status_code == 200
    second = order("b").json()
    assert order("c").status_code == 409
    cancel_customer_order(customer_id=shopper.user.id, order_id=second["id"])
    third = order("c").json()
    expire_now(Order.objects.get(id=third["id"]))
    assert expire_unpaid_orders() == 1
    assert order("d").status_code == 201
    assert slots(shopper.user) == 1
    assert_slots_match_the_orders()


@pytest.mark.django_db(transaction=True)
def test_concurrent_checkouts_of_one_shopper_get_exactly_the_limit(settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 2
    product_with_stock(sku="MUG", price=100, available=100)
    customer = UserFactory()

    def attempt(key):
        def run():
            try:
                return _create_order(customer_id=customer.id, idempotency_key=key, lines={"MUG": 1}, gated={})
            except TooManyPendingOrders:
                return "refused"

        return run

    results = run_in_threads([attempt(f"key-{i}") for i in range(8)])
    assert results.count("refused") == 6
    assert Order.objects.filter(customer=customer).count() == 2 == slots(customer)
    assert Stock.objects.get(product_id="MUG").available == 98
    assert_slots_match_the_orders()
