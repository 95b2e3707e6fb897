"""orders/services/holds.py: units of a SKU held by unpaid orders, per account and
per client address, within their caps; given back when an order is paid,
cancelled or expires; a shorter time to pay for brand-new accounts."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from orders.models import Order, UnpaidHold
from orders.services import expire_unpaid_orders
from orders.services.cancellation import cancel_customer_order
from orders.services.holds import held_units
from tests.factories import UserFactory, product_with_stock
from tests.helpers import expire_now, fill_cart, post_webhook, run_in_threads, shopper_client

pytestmark = pytest.mark.django_db


def buy(client, redis, quantity: int, key: str, sku: str = "MUG"):
    fill_cart(redis, client.user.id, {sku: quantity})
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key)


def test_one_account_holds_at_most_the_cap_of_a_sku_until_it_pays_or_cancels(redis, settings, client):
    settings.MAX_UNPAID_UNITS_PER_SKU = 5
    product_with_stock(sku="MUG", price=100, available=100)
    shopper = shopper_client()
    first = buy(shopper, redis, 3, "h-1")
    assert first.status_code == 201
    refused = buy(shopper, redis, 3, "h-2")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "hold_limit_reached"
    assert Order.objects.count() == 1 and held_units(sku="MUG", customer_id=shopper.user.id) == 3
    assert buy(shopper, redis, 2, "h-3").status_code == 201  # up to the cap exactly

    post_webhook(client, payment_id="pay-h", order_id=first.json()["id"], amount=300)
    assert held_units(sku="MUG", customer_id=shopper.user.id) == 2  # paid: no longer held
    second = buy(shopper, redis, 3, "h-4")
    assert second.status_code == 201
    cancel_customer_order(customer_id=shopper.user.id, order_id=second.json()["id"])
    expire_now(Order.objects.get(idempotency_key="h-3"))
    assert expire_unpaid_orders() == 1
    assert held_units(sku="MUG", customer_id=shopper.user.id) == 0


def test_many_fresh_accounts_from_one_address_share_its_cap(redis, settings):
    settings.MAX_UNPAID_UNITS_PER_SKU = 10
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 8
    product_with_stock(sku="MUG", price=100, available=145)
    statuses = []
    for n in range(10):
        shopper = shopper_client(UserFactory(date_joined=timezone.now()))
        shopper.defaults["REMOTE_ADDR"] = "192.0.2.50"
        statuses.append(buy(shopper, redis, 3, f"a-{n}").status_code)
    assert statuses == [201, 201] + [409] * 8
    assert held_units(sku="MUG", address="192.0.2.50") == 6
    other = shopper_client()
    other.defaults["REMOTE_ADDR"] = "203.0.113.50"
    assert buy(other, redis, 3, "b-1").status_code == 201  # another address is not held back


@pytest.mark.django_db(transaction=True)
def test_concurrent_accounts_from_one_address_get_exactly_its_cap(redis, settings):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 5
    product_with_stock(sku="MUG", price=100, available=100)
    shoppers = [shopper_client() for _ in range(16)]
    for shopper in shoppers:
        shopper.defaults["REMOTE_ADDR"] = "192.0.2.60"
        fill_cart(redis, shopper.user.id, {"MUG": 1})
    answers = run_in_threads([lambda s=s: s.post("/api/orders", HTTP_IDEMPOTENCY_KEY="c") for s in shoppers])
    assert sorted(a.status_code for a in answers) == [201] * 5 + [409] * 11
    assert held_units(sku="MUG", address="192.0.2.60") == 5 == Order.objects.count()


def test_a_brand_new_account_gets_less_time_to_pay(redis, settings):
    product_with_stock(sku="MUG", price=100, available=10)
    new = buy(shopper_client(UserFactory(date_joined=timezone.now())), redis, 1, "n-1").json()
    old = buy(shopper_client(), redis, 1, "o-1").json()
    created = Order.objects.get(id=new["id"]).created_at
    assert Order.objects.get(id=new["id"]).expires_at - created == timedelta(seconds=300)
    assert Order.objects.get(id=old["id"]).expires_at - Order.objects.get(id=old["id"]).created_at == timedelta(
        seconds=900
    )


def test_the_database_refuses_a_hold_past_its_cap():
    product_with_stock(sku="MUG", available=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        UnpaidHold.objects.create(holder="customer:1", product_id="MUG", units=6, cap=5)
