"""cart/apis.py: the shopper's cart in Redis, priced from the hot caches, in one Redis call and no SQL once warm."""

import threading

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from knox.models import AuthToken
from rest_framework.test import APIClient

from cart.services import catalog_for
from cart.storage import cart_key
from core.hotcache import hot_cache
from inventory.services.flash_sales import gate_rules
from tests.factories import ProductFactory, PromotionFactory, UserFactory, api_token, product_with_stock
from tests.helpers import redis_commands

pytestmark = pytest.mark.django_db


def put(client, sku, quantity):
    return client.put(f"/api/cart/items/{sku}", {"quantity": quantity}, format="json")


def test_cart_starts_empty(auth_client):
    response = auth_client.get("/api/cart")
    assert response.status_code == 200
    assert response.json() == {
        "items": [],
        "voucher": None,
        "subtotal": 0,
        "discounts": [],
        "shipping": None,
        "needs_shipping": False,
        "country": "ES",
        "prices_include_tax": True,
        "tax": 0,
        "tax_lines": [],
        "total": 0,
        "currency": "EUR",
        "warnings": [],
    }


def test_cart_put_get_delete(auth_client):
    a = product_with_stock(sku="A-1", name="Alpha", price=250, available=3)
    b = product_with_stock(sku="B-2", name="Beta", price=1000, available=0)

    assert put(auth_client, a.sku, 2).status_code == 200
    response = put(auth_client, b.sku, 1)
    assert response.status_code == 200
    body = response.json()
    assert body["items"] == [
        {
            "sku": "A-1",
            "name": "Alpha",
            "quantity": 2,
            "unit_price": 250,
            "discount": 0,
            "line_total": 500,
            "tax_rate": 0,
            "net": 500,
            "tax": 0,
            "gross": 500,
            "in_stock": True,
        },
        {
            "sku": "B-2",
            "name": "Beta",
            "quantity": 1,
            "unit_price": 1000,
            "discount": 0,
            "line_total": 1000,
            "tax_rate": 0,
            "net": 1000,
            "tax": 0,
            "gross": 1000,
            "in_stock": False,
        },
    ]
    assert (body["subtotal"], body["discounts"], body["total"]) == (1500, [], 1500)
    assert auth_client.get("/api/cart").json() == body

    assert auth_client.delete(f"/api/cart/items/{b.sku}").status_code == 204
    assert auth_client.delete(f"/api/cart/items/{b.sku}").status_code == 204  # already gone
    assert [line["sku"] for line in auth_client.get("/api/cart").json()["items"]] == ["A-1"]


def test_cart_put_is_idempotent_and_absolute(auth_client, redis):
    product = product_with_stock()
    for _ in range(3):
        assert put(auth_client, product.sku, 4).status_code == 200
    assert redis.hgetall(cart_key(auth_client.user.id)) == {product.sku.encode(): b"4"}
    put(auth_client, product.sku, 1)
    assert redis.hgetall(cart_key(auth_client.user.id)) == {product.sku.encode(): b"1"}


def test_cart_put_zero_removes_the_line(auth_client, redis):
    product = product_with_stock()
    put(auth_client, product.sku, 2)
    response = put(auth_client, product.sku, 0)
    assert response.status_code == 200
    assert response.json()["items"] == []
    assert not redis.exists(cart_key(auth_client.user.id))


def test_cart_ttl_is_set_and_refreshed_on_every_write(auth_client, redis):
    a, b = product_with_stock(), product_with_stock()
    key = cart_key(auth_client.user.id)
    put(auth_client, a.sku, 1)
    assert settings.CART_TTL_SECONDS - 5 <= redis.ttl(key) <= settings.CART_TTL_SECONDS
    redis.expire(key, 100)
    put(auth_client, b.sku, 1)
    assert redis.ttl(key) > 100
    redis.expire(key, 100)
    auth_client.delete(f"/api/cart/items/{b.sku}")
    assert redis.ttl(key) > 100
    redis.expire(key, 100)
    auth_client.get("/api/cart")
    assert redis.ttl(key) <= 100  # reads do not extend it


@pytest.mark.parametrize(
    "body",
    [
        {"quantity": "2"},
        {"quantity": 2.5},
        {"quantity": 2.0},
        {"quantity": True},
        {"quantity": -1},
        {"quantity": 100},
        {"quantity": 10**30},
        {"quantity": None},
        {"qty": 2},
        {},
        [],
    ],
)
def test_cart_put_bad_quantity_is_400_and_writes_nothing(auth_client, redis, body):
    product = product_with_stock()
    response = auth_client.put(f"/api/cart/items/{product.sku}", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] in {"invalid", "malformed_request"}
    assert not redis.exists(cart_key(auth_client.user.id))


def test_cart_put_malformed_json_is_400(auth_client):
    product = product_with_stock()
    response = auth_client.put(f"/api/cart/items/{product.sku}", "{", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_request"


def test_cart_put_unknown_fields_are_ignored(auth_client):
    product = product_with_stock()
    response = auth_client.put(f"/api/cart/items/{product.sku}", {"quantity": 1, "price": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["items"][0]["unit_price"] == product.price


@pytest.mark.parametrize("sku,code", [("NOPE", "unknown_sku"), ("bad sku!", "not_found"), ("x" * 65, "not_found")])
def test_cart_put_unknown_sku_is_404(auth_client, sku, code):
    response = put(auth_client, sku, 1)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == code  # a SKU of the wrong shape matches no route


def test_cart_put_inactive_sku_is_422(auth_client):
    product = product_with_stock(is_active=False)
    response = put(auth_client, product.sku, 1)
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"sku": product.sku}


def test_cart_needs_a_shopper_or_a_guest_token(api_client):
    assert api_client.get("/api/cart").status_code == 401
    assert api_client.delete("/api/cart/items/A").status_code == 401
    assert put(api_client, "A", 1).json()["error"]["code"] == "unknown_sku"  # a guest's first write


def test_cart_price_change_shows_in_next_get(auth_client, django_capture_on_commit_callbacks):
    product = product_with_stock(price=500)
    put(auth_client, product.sku, 2)
    with django_capture_on_commit_callbacks(execute=True):  # the commit moves the cache generation
        product.price = 700
        product.save()
    body = auth_client.get("/api/cart").json()
    assert body["items"][0]["unit_price"] == 700
    assert body["total"] == 1400


def test_cart_inactive_or_unknown_sku_is_a_warning_left_out_of_total(
    auth_client, redis, django_capture_on_commit_callbacks
):
    kept, dropped = product_with_stock(price=100), product_with_stock(price=900)
    put(auth_client, kept.sku, 1)
    put(auth_client, dropped.sku, 1)
    redis.hset(cart_key(auth_client.user.id), "GONE", 3)
    with django_capture_on_commit_callbacks(execute=True):
        dropped.is_active = False
        dropped.save()
    body = auth_client.get("/api/cart").json()
    assert [line["sku"] for line in body["items"]] == [kept.sku]
    assert body["total"] == 100
    assert {(w["sku"], w["code"]) for w in body["warnings"]} == {
        (dropped.sku, "inactive_sku"),
        ("GONE", "unknown_sku"),
    }


def test_cart_of_another_shopper_is_never_visible(auth_client):
    product = product_with_stock()
    put(auth_client, product.sku, 5)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {api_token(UserFactory())}")
    assert other.get("/api/cart").json()["items"] == []
    put(other, product.sku, 1)
    assert auth_client.get("/api/cart").json()["items"][0]["quantity"] == 5


def test_cart_full_is_409(auth_client, settings):
    settings.CART_MAX_LINES = 3
    products = [product_with_stock() for _ in range(4)]
    for product in products[:3]:
        assert put(auth_client, product.sku, 1).status_code == 200
    response = put(auth_client, products[3].sku, 1)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cart_full"
    assert put(auth_client, products[0].sku, 7).status_code == 200  # existing lines still change


def test_cart_deactivating_a_product_invalidates_the_cache(auth_client, django_capture_on_commit_callbacks):
    product = product_with_stock()
    assert put(auth_client, product.sku, 1).status_code == 200  # warm
    with django_capture_on_commit_callbacks(execute=True):
        product.is_active = False
        product.save()
    response = put(auth_client, product.sku, 2)
    assert response.status_code == 422


def test_cart_deleted_token_is_refused_at_once(auth_client, django_capture_on_commit_callbacks):
    product = product_with_stock()
    assert put(auth_client, product.sku, 1).status_code == 200  # token cached
    with django_capture_on_commit_callbacks(execute=True):
        AuthToken.objects.get(user=auth_client.user).delete()
    assert put(auth_client, product.sku, 2).status_code == 401
    assert auth_client.get("/api/cart").status_code == 401


def test_cart_cache_invalidated_by_another_process(auth_client, redis):
    """Another process bumps the generation: this one's stale cache is dropped."""
    product = product_with_stock()
    assert put(auth_client, product.sku, 1).status_code == 200
    type(product).objects.filter(sku=product.sku).update(is_active=False)  # no signal, like another process
    redis.incr("shop:cache-generation")  # ... which bumped the generation after its commit
    assert put(auth_client, product.sku, 2).status_code == 422


def test_cart_put_and_delete_make_no_sql_query_once_warm(auth_client, django_assert_num_queries):
    product = product_with_stock()
    put(auth_client, product.sku, 1)  # warms token, product and stock hint
    with django_assert_num_queries(0):
        assert put(auth_client, product.sku, 2).status_code == 200
    with django_assert_num_queries(0):
        assert auth_client.delete(f"/api/cart/items/{product.sku}").status_code == 204


def test_cart_get_makes_one_query_and_one_redis_call(auth_client, django_assert_num_queries, redis, monkeypatch):
    products = [product_with_stock() for _ in range(5)]
    for product in products:
        put(auth_client, product.sku, 1)
    hot_cache.products.clear()  # cold prices: the one query
    sent = redis_commands(redis, monkeypatch)
    with django_assert_num_queries(1):
        body = auth_client.get("/api/cart").json()
    assert len(body["items"]) == 5
    assert sent == ["EVALSHA"]  # one round-trip: the script reads the generation and the cart
    with django_assert_num_queries(0):  # warm: prices from the generation-checked cache
        assert auth_client.get("/api/cart").json() == body


def test_cart_json_matches_the_documented_serializer(auth_client, redis):
    from cart.apis import CartOutputSerializer, cart_json
    from cart.services import get_cart

    product_with_stock(sku="A")
    PromotionFactory(value=10)  # a discount on the line and in the cart's list
    put(auth_client, "A", 2)
    redis.hset(cart_key(auth_client.user.id), "GONE", 1)
    cart = get_cart(customer_id=auth_client.user.id)
    assert cart.items[0].discount and cart.discounts and cart.warnings
    assert cart_json(cart) == CartOutputSerializer(cart).data


def test_cart_put_makes_one_redis_call_once_warm(auth_client, redis, monkeypatch):
    product = product_with_stock()
    put(auth_client, product.sku, 1)
    sent = redis_commands(redis, monkeypatch)
    assert put(auth_client, product.sku, 3).status_code == 200
    assert sent == ["EVALSHA"]  # generation check, rate limit and write: one script


@pytest.mark.django_db(transaction=True)
def test_cart_line_cap_holds_under_150_concurrent_adds(redis):
    user = UserFactory()
    token = api_token(user)
    skus = [product.sku for product in ProductFactory.create_batch(150)]
    # Warm the caches so that the 150 threads race on Redis alone, not for
    # PostgreSQL's 100 connections.
    catalog_for(skus)
    gate_rules()  # a cart write asks whether its SKU is a flash sale's
    warm = APIClient()
    warm.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert warm.get("/api/cart").status_code == 200
    statuses = []
    barrier = threading.Barrier(len(skus))

    def add(sku):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        barrier.wait()
        try:
            statuses.append(put(client, sku, 1).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=add, args=(sku,)) for sku in skus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert redis.hlen(cart_key(user.id)) == settings.CART_MAX_LINES == 100
    assert sorted(set(statuses)) == [200, 409]
    assert statuses.count(200) == 100
    assert statuses.count(409) == 50


def test_made_up_skus_are_counted_against_the_write_limit_before_any_query(auth_client, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "cart_write": "3/min"}
    for n in range(3):
        assert auth_client.put(f"/api/cart/items/NOPE-{n}", {"quantity": 1}).status_code == 404
    with CaptureQueriesContext(connection) as queries:
        response = auth_client.put("/api/cart/items/NOPE-3", {"quantity": 1})
    assert response.status_code == 429 and "Retry-After" in response.headers
    assert not [q for q in queries if "shop_product" in q["sql"]]  # refused before the lookup


def test_a_cold_lookup_of_a_real_product_counts_the_write_once(auth_client, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "cart_write": "2/min"}
    product_with_stock(sku="A")
    product_with_stock(sku="B")
    assert auth_client.put("/api/cart/items/A", {"quantity": 1}).status_code == 200  # cold: counted first
    assert auth_client.put("/api/cart/items/B", {"quantity": 1}).status_code == 200  # cold too
    assert auth_client.put("/api/cart/items/A", {"quantity": 2}).status_code == 429  # warm: the script counts
