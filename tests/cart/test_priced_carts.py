"""A cart is priced once per content (lines, voucher, shipping, stock hints) and
cache generation, until time alone could change its prices (cart/services.py _price)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from cart import services
from tests.factories import PromotionFactory, product_with_stock
from tests.helpers import wall_clock_ahead

pytestmark = pytest.mark.django_db


@pytest.fixture
def priced(monkeypatch):
    """How many times the cart was really priced."""
    calls = []
    real = services._price_now

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(services, "_price_now", counting)
    return calls


def get(client):
    response = client.get("/api/cart")
    assert response.status_code == 200
    return response.json()


def test_the_same_cart_is_priced_once_and_a_change_prices_it_again(auth_client, priced):
    product_with_stock(sku="MUG", price=1000, available=5)
    auth_client.put("/api/cart/items/MUG", {"quantity": 2}, format="json")
    first = get(auth_client)
    assert get(auth_client) == first and len(priced) == 1  # the PUT priced it; both reads kept it
    auth_client.put("/api/cart/items/MUG", {"quantity": 3}, format="json")
    assert get(auth_client)["total"] == 3000 and len(priced) == 2
    assert get(auth_client)["items"][0]["in_stock"] is True
    auth_client.put("/api/cart/items/MUG", {"quantity": 6}, format="json")  # more than the 5 in stock
    assert get(auth_client)["items"][0]["in_stock"] is False and len(priced) == 3


def test_a_promotion_that_starts_later_prices_the_cart_anew_when_it_starts(auth_client, priced, monkeypatch):
    product_with_stock(sku="MUG", price=1000, available=5)
    PromotionFactory(value=10, starts_at=timezone.now() + timedelta(minutes=5))
    auth_client.put("/api/cart/items/MUG", {"quantity": 1}, format="json")
    assert get(auth_client)["total"] == 1000 and len(priced) == 1
    wall_clock_ahead(monkeypatch, 301)
    assert get(auth_client)["total"] == 900 and len(priced) == 2


def test_a_change_to_the_catalog_drops_what_was_priced(auth_client, priced):
    product = product_with_stock(sku="MUG", price=1000, available=5)
    auth_client.put("/api/cart/items/MUG", {"quantity": 1}, format="json")
    assert get(auth_client)["total"] == 1000
    product.price = 1200
    product.save()  # moves the cache generation
    assert get(auth_client)["total"] == 1200 and len(priced) == 2


def test_the_next_day_prices_the_cart_anew(auth_client, priced, monkeypatch):
    """Tax rates change by the day: nothing priced today is kept past midnight."""
    product_with_stock(sku="MUG", price=1000, available=5)
    auth_client.put("/api/cart/items/MUG", {"quantity": 1}, format="json")
    get(auth_client)
    now = timezone.now()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    wall_clock_ahead(monkeypatch, (midnight - now).total_seconds() + 1)
    get(auth_client)
    assert len(priced) == 2


def test_a_shopper_this_process_knows_reads_the_cart_past_drf_and_gets_the_same_answer(auth_client, monkeypatch):
    from cart.apis import CartApi

    product_with_stock(sku="MUG", price=1000, available=5)
    auth_client.put("/api/cart/items/MUG", {"quantity": 2}, format="json")
    through_drf = []
    real = CartApi.initial
    monkeypatch.setattr(CartApi, "initial", lambda self, *a, **k: (through_drf.append(1), real(self, *a, **k)))
    first = auth_client.get("/api/cart")  # the token is in this process's memory since the PUT
    assert through_drf == [] and first.status_code == 200
    assert first.json()["total"] == 2000 and first["Allow"] == "GET, HEAD, OPTIONS"
    stranger = APIClient(HTTP_AUTHORIZATION="Token " + "0" * 64)
    assert stranger.get("/api/cart").status_code == 401  # DRF's answer
    assert through_drf == [1]


def test_a_plain_put_writes_past_drf_and_every_other_body_takes_drfs_path(auth_client, monkeypatch):
    from cart.apis import CartItemApi

    product_with_stock(sku="MUG", price=1000, available=5)
    auth_client.get("/api/cart")  # the token is now in this process's memory
    through_drf = []
    real = CartItemApi.initial
    monkeypatch.setattr(CartItemApi, "initial", lambda self, *a, **k: (through_drf.append(1), real(self, *a, **k)))
    assert auth_client.put("/api/cart/items/MUG", {"quantity": 2}, format="json").json()["total"] == 2000
    unknown = auth_client.put("/api/cart/items/NOPE", {"quantity": 1}, format="json")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_sku")  # answered past DRF too
    assert through_drf == []
    for body in ({"quantity": 1.0}, {"quantity": True}, {"quantity": 100}):
        response = auth_client.put("/api/cart/items/MUG", body, format="json")
        assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid")
    assert auth_client.put("/api/cart/items/MUG", {"quantity": 3, "note": "x"}, format="json").status_code == 200
    assert len(through_drf) == 4


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"quantity":3}', 3),
        (b'{"quantity": 0}', 0),
        (b'{ "quantity" : 7 }', 7),  # parsed, not matched
        (b'{"quantity":\n2}', 2),
        (b'{"quantity":3,"quantity":4}', 4),  # as json.loads (and DRF) reads it
        (b'{"quantity":03}', None),  # not JSON
        (b'{"quantity":100}', None),  # above CART_MAX_QUANTITY: DRF's 400
        (b'{"quantity":-1}', None),
        (b'{"quantity":1e0}', None),
        (b'{"quantity":1.0}', None),
        (b'{"quantity":true}', None),
        (b'{"quantity":"3"}', None),
        (b'{"quantity":3,"note":1}', None),
        (b"[3]", None),
        (b'{"quantity":3', None),
    ],
)
def test_plain_quantity_reads_exactly_what_json_says(body, expected):
    from django.test import RequestFactory

    from cart.apis import plain_quantity

    request = RequestFactory().put("/api/cart/items/MUG", body, content_type="application/json")
    assert plain_quantity(request) == expected
    other_type = RequestFactory().put("/api/cart/items/MUG", body, content_type="text/plain")
    assert plain_quantity(other_type) is None
