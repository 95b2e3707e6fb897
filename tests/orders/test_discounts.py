"""Checkout charges what the cart showed: the catalog's prices and the automatic
promotions, by the shop's one pricing function, snapshotted on the order (per
item and which promotions took how much), in OrderCreated and in the order
JSON; the payment expected is the discounted total. The queue's writer writes
the same as checkout priced it."""

import pytest
from django.test import Client

from orders.models import Order, OrderStatus
from outbox.models import OutboxEvent
from shop.models import Promotion
from tests.factories import PromotionFactory, product_with_stock
from tests.helpers import checkout, fill_cart, post_webhook, shopper_client
from tests.orders.conftest import SKU, drain, queue_sale, shopper_with_cart

pytestmark = pytest.mark.django_db


def test_the_order_costs_what_the_cart_showed_and_keeps_its_discounts(redis):
    mug, tee = product_with_stock(sku="MUG", price=999, available=10), product_with_stock(sku="TEE", price=2000)
    fifteen = PromotionFactory(name="Mugs -15%", value=15, scope=Promotion.Scope.SKUS, products=[mug])
    spring = PromotionFactory(name="Spring", kind=Promotion.Kind.CART_AMOUNT, value=1001, min_subtotal=3000)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"MUG": 2, "TEE": 1})
    cart = shopper.get("/api/cart").json()

    response = checkout(shopper, key="k1")

    assert response.status_code == 201, response.content
    order = response.json()
    # 15% of 999 is 149.85: 150 off each unit; then 1001 off the cart, spread by largest remainder.
    assert order["subtotal"] == cart["subtotal"] == 2 * 999 + 2000
    assert order["total"] == cart["total"] == 2 * 999 + 2000 - 300 - 1001
    assert [(i["sku"], i["discount"], i["line_total"]) for i in order["items"]] == [
        (line["sku"], line["discount"], line["line_total"]) for line in cart["items"]
    ]
    assert sum(i["line_total"] for i in order["items"]) == order["total"]
    assert order["discounts"] == [
        {"promotion_id": fifteen.id, "name": "Mugs -15%", "code": None, "amount": 300},
        {"promotion_id": spring.id, "name": "Spring", "code": None, "amount": 1001},
    ]
    written = Order.objects.get()
    assert written.total_amount == order["total"] and written.discounts == order["discounts"]
    assert {i.product_id: i.discount for i in written.items.all()} == {i["sku"]: i["discount"] for i in order["items"]}
    [event] = OutboxEvent.objects.filter(event_type="OrderCreated")
    assert event.payload["subtotal"] == order["subtotal"] and event.payload["total"] == order["total"]
    assert event.payload["discounts"] == order["discounts"]
    discounts = {i["sku"]: i["discount"] for i in order["items"]}
    assert {i["sku"]: i["discount"] for i in event.payload["items"]} == discounts
    assert tee.price == 2000  # the catalog price is kept per item; the discount beside it


def test_the_payment_expected_is_the_discounted_total(redis):
    product_with_stock(sku="MUG", price=1000, available=10)
    PromotionFactory(value=20)  # 20% off the whole cart
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"MUG": 1})
    order = checkout(shopper, key="k1").json()
    assert order["total"] == 800
    webhook = Client()
    assert post_webhook(webhook, payment_id="p-full", order_id=order["id"], amount=1000).json()["outcome"] != "applied"
    assert post_webhook(webhook, payment_id="p-ok", order_id=order["id"], amount=800).json()["outcome"] == "applied"
    assert Order.objects.get(id=order["id"]).status == OrderStatus.PAID


def test_a_promotion_outside_its_window_takes_nothing(redis):
    from datetime import timedelta

    from django.utils import timezone

    product_with_stock(sku="MUG", price=1000, available=10)
    now = timezone.now()
    PromotionFactory(value=50, starts_at=now + timedelta(hours=1))
    PromotionFactory(value=50, starts_at=now - timedelta(hours=2), ends_at=now - timedelta(hours=1))
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"MUG": 1})
    order = checkout(shopper, key="k1").json()
    assert order["total"] == order["subtotal"] == 1000 and order["discounts"] == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.kafka
@pytest.mark.usefixtures("queue_topic")
def test_a_queued_order_is_written_as_checkout_priced_it(redis):
    queue_sale(5)  # 500 a unit
    PromotionFactory(name="Flash -10%", value=10)
    client = shopper_with_cart(redis, {SKU: 2})
    queued = client.post("/api/orders", HTTP_IDEMPOTENCY_KEY="q-1")
    assert queued.status_code == 202 and queued.json()["total"] == 900
    assert queued.json()["discounts"][0]["amount"] == 100
    drain(1)
    written = client.get(f"/api/orders/{queued.json()['id']}").json()
    assert written["status"] == OrderStatus.PENDING_PAYMENT
    assert (written["total"], written["subtotal"], written["discounts"]) == (900, 1000, queued.json()["discounts"])
    assert written["items"][0]["discount"] == 100


def test_a_retry_after_a_promotion_ended_gets_its_order_not_a_refusal(redis):
    """The answer to k1 was lost; the promotion that priced it ends; the retry under
    k1 is answered with the order k1 made, not refused as another request."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.helpers import wait_until

    product_with_stock(sku="MUG", price=1000, available=10)
    ends = timezone.now() + timedelta(seconds=1)
    PromotionFactory(value=20, ends_at=ends)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"MUG": 1})
    first = checkout(shopper, key="k1")
    assert first.status_code == 201 and first.json()["total"] == 800
    assert wait_until(lambda: timezone.now() >= ends, 5)
    retry = checkout(shopper, key="k1")
    assert retry.status_code == 200 and retry["Idempotent-Replayed"] == "true"
    assert retry.json()["id"] == first.json()["id"] and retry.json()["total"] == 800
