"""orders/apis.py: checkout (POST /api/orders) with its idempotency key, and a
shopper's own orders."""

import pytest

from cart import storage
from cart.storage import cart_key, taken_key
from inventory.exceptions import OutOfStock
from inventory.models import Stock
from orders.models import Order, OrderStatus
from orders.services import checkout as checkout_service
from orders.services import place_order
from orders.services.admission import admit_cart
from outbox.models import OutboxEvent
from tests.factories import SHIPPING_ADDRESS, product_with_stock
from tests.helpers import checkout, fill_cart, redis_commands, shopper_client

pytestmark = pytest.mark.django_db


def test_checkout_creates_order_reserves_stock_and_writes_event(shopper, redis, django_capture_on_commit_callbacks):
    a = product_with_stock(sku="A", name="Alpha", price=300, available=5)
    b = product_with_stock(sku="B", name="Beta", price=1000, available=1)
    fill_cart(redis, shopper.user.id, {"B": 1, "A": 2})

    with django_capture_on_commit_callbacks(execute=True):
        response = checkout(shopper)

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "PENDING_PAYMENT"
    assert body["total"] == body["subtotal"] == 1600 and body["discounts"] == [] and body["currency"] == "EUR"
    assert body["items"] == [
        {
            "sku": "A",
            "name": "Alpha",
            "quantity": 2,
            "unit_price": 300,
            "discount": 0,
            "line_total": 600,
            "tax_rate": 0,
            "net": 600,
            "tax": 0,
            "gross": 600,
            "cancelled": 0,
            "returned": 0,
            "refunded": 0,
        },
        {
            "sku": "B",
            "name": "Beta",
            "quantity": 1,
            "unit_price": 1000,
            "discount": 0,
            "line_total": 1000,
            "tax_rate": 0,
            "net": 1000,
            "tax": 0,
            "gross": 1000,
            "cancelled": 0,
            "returned": 0,
            "refunded": 0,
        },
    ]
    stocks = {s.product_id: (s.available, s.reserved) for s in Stock.objects.all()}
    assert stocks == {a.sku: (3, 2), b.sku: (0, 1)}
    [event] = OutboxEvent.objects.all()
    assert event.event_type == "OrderCreated" and event.aggregate_id == str(body["id"])
    assert event.payload["total"] == 1600 and len(event.payload["items"]) == 2
    assert event.published_at is None
    assert not redis.exists(f"cart:{shopper.user.id}")  # taken by the checkout
    order = Order.objects.get()
    delta = (order.expires_at - order.created_at).total_seconds()
    assert delta == 900


def test_checkout_same_key_same_cart_replays(shopper, redis):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    first = checkout(shopper)
    second = checkout(shopper)  # the same key finds the cart the first attempt took
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    assert Order.objects.count() == 1
    assert Stock.objects.get().reserved == 1


def test_checkout_replay_after_cart_was_cleared_returns_the_order(shopper, redis):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    first = checkout(shopper)
    fill_cart(redis, shopper.user.id, {})
    second = checkout(shopper)
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]


def test_checkout_same_key_different_cart_is_422(shopper, redis):
    product_with_stock(sku="A", available=5)
    product_with_stock(sku="B", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    checkout(shopper)
    fill_cart(redis, shopper.user.id, {"A": 1, "B": 1})
    response = checkout(shopper)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Order.objects.count() == 1
    assert redis.hgetall(cart_key(shopper.user.id)) == {b"A": b"1", b"B": b"1"}  # this cart was not ordered: back


def test_a_written_order_costs_one_redis_call_in_all(shopper, redis, monkeypatch, django_capture_on_commit_callbacks):
    """The admission's script takes the cart: nothing is left to clear once the order is written."""
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    place_order(customer_id=shopper.user.id, idempotency_key="warm", shipping_address=SHIPPING_ADDRESS)
    fill_cart(redis, shopper.user.id, {"A": 2})

    sent = redis_commands(redis, monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):
        placed = place_order(customer_id=shopper.user.id, idempotency_key="k", shipping_address=SHIPPING_ADDRESS)

    assert not placed.replayed and sent == ["EVALSHA"]
    assert not redis.exists(cart_key(shopper.user.id))
    assert redis.hgetall(taken_key(shopper.user.id)) == {b"A": b"2", b"@checkout": b"k"}


def test_a_retry_after_a_lost_answer_orders_what_the_first_attempt_took(shopper, redis):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 2})
    admit_cart(customer_id=shopper.user.id, idempotency_key="lost", rate_limited=False)  # then the process died

    assert shopper.get("/api/cart").json()["items"] == []
    assert checkout(shopper, key="another").json()["error"]["code"] == "cart_empty"
    retried = checkout(shopper, key="lost")
    assert retried.status_code == 201 and [(i["sku"], i["quantity"]) for i in retried.json()["items"]] == [("A", 2)]
    again = checkout(shopper, key="lost")  # and once written, the same key replays it; the cart stays empty
    assert (again.status_code, again.json()["id"]) == (200, retried.json()["id"])
    assert not redis.exists(cart_key(shopper.user.id)) and Order.objects.count() == 1


def test_a_failed_checkout_gives_the_cart_back_and_lines_set_since_win(shopper, redis, monkeypatch):
    product_with_stock(sku="A", available=5)
    product_with_stock(sku="B", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1, "B": 1})
    real = checkout_service.reserve_stock

    def shopper_edits_then_stock_runs_out(**kwargs):
        redis.hset(cart_key(shopper.user.id), mapping={"B": 4, "C": 1})  # another tab, meanwhile
        real(**kwargs)
        raise OutOfStock(sku="A", requested=1, available=0)

    monkeypatch.setattr(checkout_service, "reserve_stock", shopper_edits_then_stock_runs_out)
    assert checkout(shopper, key="k").status_code == 409

    assert redis.hgetall(cart_key(shopper.user.id)) == {b"A": b"1", b"B": b"4", b"C": b"1"}
    assert not redis.exists(taken_key(shopper.user.id))
    assert not Order.objects.exists() and Stock.objects.filter(reserved=0).count() == 2
    assert storage.give_back([(shopper.user.id, "k")]) == 0  # once


def test_a_cart_taken_by_another_checkout_is_not_given_back_to_the_wrong_one(shopper, redis):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    admit_cart(customer_id=shopper.user.id, idempotency_key="first", rate_limited=False)
    fill_cart(redis, shopper.user.id, {"A": 3})
    admit_cart(customer_id=shopper.user.id, idempotency_key="second", rate_limited=False)

    assert storage.give_back([(shopper.user.id, "first")]) == 0  # its cart was ordered or replaced
    assert not redis.exists(cart_key(shopper.user.id))
    assert storage.give_back([(shopper.user.id, "second")]) == 1
    assert redis.hgetall(cart_key(shopper.user.id)) == {b"A": b"3"}


def test_checkout_empty_cart_is_422(shopper):
    response = checkout(shopper)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "cart_empty"


def test_checkout_out_of_stock_is_409_naming_the_sku(shopper, redis):
    product_with_stock(sku="A", available=2)
    fill_cart(redis, shopper.user.id, {"A": 3})
    response = checkout(shopper)
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "out_of_stock",
        "message": "Not enough stock for this SKU.",
        "details": {"sku": "A", "requested": 3, "available": 2},
    }


def test_checkout_atomic_when_last_line_is_out_of_stock(shopper, redis):
    product_with_stock(sku="A", available=5)
    product_with_stock(sku="B", available=5)
    product_with_stock(sku="C", available=1)
    fill_cart(redis, shopper.user.id, {"A": 1, "B": 2, "C": 2})
    assert checkout(shopper).status_code == 409
    assert {s.product_id: (s.available, s.reserved) for s in Stock.objects.all()} == {
        "A": (5, 0),
        "B": (5, 0),
        "C": (1, 0),
    }
    assert not Order.objects.exists()
    assert not OutboxEvent.objects.exists()
    assert redis.hlen(f"cart:{shopper.user.id}") == 3  # the cart is kept to fix and retry


def test_checkout_failed_attempt_leaves_the_key_free_for_a_retry(shopper, redis):
    product_with_stock(sku="A", available=0)
    fill_cart(redis, shopper.user.id, {"A": 1})
    assert checkout(shopper, key="retry-me").status_code == 409
    Stock.objects.filter(product_id="A").update(available=1)
    assert checkout(shopper, key="retry-me").status_code == 201


@pytest.mark.parametrize("active", [False, None])
def test_checkout_inactive_or_unknown_sku_is_422_naming_it(shopper, redis, active):
    product_with_stock(sku="A", available=5)
    if active is False:
        product_with_stock(sku="Z", available=5, is_active=False)
    fill_cart(redis, shopper.user.id, {"A": 1, "Z": 1})
    response = checkout(shopper)
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"sku": "Z"}
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    ("key", "code"),
    [
        (None, "idempotency_key_missing"),
        ("", "idempotency_key_invalid"),
        ("x" * 65, "idempotency_key_invalid"),
        ("has space", "idempotency_key_invalid"),
        ("ключ", "idempotency_key_invalid"),
    ],
)
def test_checkout_bad_idempotency_key_is_400(shopper, redis, key, code):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    response = checkout(shopper, key=key)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not Order.objects.exists()


def test_checkout_price_snapshot_survives_price_change(shopper, redis):
    product = product_with_stock(sku="A", price=500, available=5)
    fill_cart(redis, shopper.user.id, {"A": 2})
    order_id = checkout(shopper).json()["id"]
    product.price = 9999
    product.save()
    body = shopper.get(f"/api/orders/{order_id}").json()
    assert body["items"][0]["unit_price"] == 500
    assert body["total"] == 1000


def test_checkout_requires_authentication(api_client):
    assert api_client.post("/api/orders", HTTP_IDEMPOTENCY_KEY="k").status_code == 401


def test_order_detail_of_someone_else_is_404_like_a_missing_one(shopper, redis):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    order_id = checkout(shopper).json()["id"]
    stranger = shopper_client()
    foreign = stranger.get(f"/api/orders/{order_id}")
    missing = stranger.get("/api/orders/999999999")
    huge = stranger.get(f"/api/orders/{10**30}")
    assert foreign.status_code == missing.status_code == huge.status_code == 404
    assert foreign.json() == missing.json() == huge.json()


def test_order_list_is_the_shoppers_own_newest_first(shopper, redis):
    product_with_stock(sku="A", available=5)
    ids = []
    for key in ("k1", "k2", "k3"):
        fill_cart(redis, shopper.user.id, {"A": 1})
        ids.append(checkout(shopper, key=key).json()["id"])
    other = shopper_client()
    fill_cart(redis, other.user.id, {"A": 1})
    checkout(other)
    body = shopper.get("/api/orders").json()
    assert body["count"] == 3
    assert [order["id"] for order in body["results"]] == ids[::-1]
    assert body["results"][0]["status"] == OrderStatus.PENDING_PAYMENT
