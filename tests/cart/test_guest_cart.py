"""A guest's cart (Cart-Token) and its merge into the shopper's cart at login."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from cart.services import _guest_digest
from cart.storage import cart_key, guest_cart_keys
from tests.factories import PASSWORD, UserFactory, product_with_stock
from tests.helpers import fill_cart, run_in_threads, shopper_client

pytestmark = pytest.mark.django_db


def put(client, sku, quantity, token=None):
    headers = {"HTTP_CART_TOKEN": token} if token else {}
    return client.put(f"/api/cart/items/{sku}", {"quantity": quantity}, format="json", **headers)


def guest_cart(lines: dict[str, int]) -> str:
    """A guest cart through the API: its token."""
    client, token = APIClient(), None
    for sku, quantity in lines.items():
        response = put(client, sku, quantity, token)
        assert response.status_code == 200, response.content
        token = token or response["Cart-Token"]
    return token


def login(token=None, user=None, path="/api/auth/token"):
    user = user or UserFactory()
    headers = {"HTTP_CART_TOKEN": token} if token else {}
    body = {"username": user.username, "password": PASSWORD}
    return APIClient().post(path, body, format="json", **headers), user


def test_a_first_write_without_a_token_starts_a_guest_cart(redis):
    product_with_stock(sku="A", price=300, available=5)
    client = APIClient()
    first = put(client, "A", 2)
    token = first["Cart-Token"]
    assert first.status_code == 200 and len(token) == 43  # 256 random bits, URL-safe
    assert first.json()["total"] == 600
    assert "Cart-Token" not in put(client, "A", 3, token)  # handed out once
    got = client.get("/api/cart", HTTP_CART_TOKEN=token).json()
    assert got["items"][0]["quantity"] == 3
    assert redis.ttl(guest_cart_keys(_guest_digest(token))[0]) > 6 * 24 * 3600  # GUEST_CART_TTL_SECONDS
    assert not redis.keys(f"*{token}*")  # Redis keeps a digest, never the token
    assert client.delete("/api/cart/items/A", HTTP_CART_TOKEN=token).status_code == 204
    assert client.get("/api/cart", HTTP_CART_TOKEN=token).json()["items"] == []
    assert put(client, "A", 1, token).status_code == 200  # an emptied cart's token still works


@pytest.mark.parametrize("token", ["x" * 43, "short", "../../etc", "A" * 200])
def test_a_token_nobody_was_given_reads_and_writes_nothing(token):
    product_with_stock(sku="A", available=5)
    guest_cart({"A": 1})
    client = APIClient()
    for response in (
        client.get("/api/cart", HTTP_CART_TOKEN=token),
        put(client, "A", 1, token),
        client.delete("/api/cart/items/A", HTTP_CART_TOKEN=token),
    ):
        assert response.status_code == 404 and response.json()["error"]["code"] == "cart_token_unknown"


def test_a_guest_cart_has_the_shoppers_rules():
    product_with_stock(sku="A", available=5)
    product_with_stock(sku="GONE", available=5, is_active=False)
    token = guest_cart({"A": 1})
    assert put(APIClient(), "A", 100, token).status_code == 400
    assert put(APIClient(), "NOPE", 1, token).json()["error"]["code"] == "unknown_sku"
    assert put(APIClient(), "GONE", 1, token).json()["error"]["code"] == "inactive_sku"


def test_guest_writes_are_limited_per_token_and_per_address(settings):
    product_with_stock(sku="A", available=5)
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "guest_cart_write": "3/min", "guest_cart_address": "1000/min"}
    token = guest_cart({"A": 1})  # one write
    assert [put(APIClient(), "A", 2, token).status_code for _ in range(3)] == [200, 200, 429]
    assert put(APIClient(), "A", 1).status_code == 200  # another cart: its own token's limit

    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "guest_cart_write": "1000/min", "guest_cart_address": "2/min"}
    one = "192.0.2.1"  # new carts, new tokens, one address
    statuses = [put(APIClient(REMOTE_ADDR=one), "A", 1).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert put(APIClient(REMOTE_ADDR=one), "A", 1).json()["error"]["code"] == "rate_limited"
    assert put(APIClient(REMOTE_ADDR="203.0.113.9"), "A", 1).status_code == 200  # another address
    spoofed = APIClient(REMOTE_ADDR=one).put(
        "/api/cart/items/A", {"quantity": 1}, format="json", HTTP_X_FORWARDED_FOR="198.51.100.7"
    )
    assert spoofed.status_code == 429  # X-Forwarded-For from the client is not an address (TRUSTED_PROXIES=0)


def test_login_with_a_cart_token_merges_the_guest_cart_once(redis):
    for sku in ("A", "B", "C"):
        product_with_stock(sku=sku, available=500)
    user = UserFactory()
    fill_cart(redis, user.id, {"A": 5, "B": 1})
    token = guest_cart({"A": 2, "B": 7, "C": 99})
    response, _ = login(token, user)
    assert response.status_code == 200 and response.json()["cart_merged"] == 3
    assert {k.decode(): int(v) for k, v in redis.hgetall(cart_key(user.id)).items()} == {"A": 5, "B": 7, "C": 99}
    assert not redis.exists(*guest_cart_keys(_guest_digest(token)))
    assert APIClient().get("/api/cart", HTTP_CART_TOKEN=token).status_code == 404  # a used token is dead
    again, _ = login(token, user)
    assert again.status_code == 200 and again.json()["cart_merged"] == 0
    without, _ = login(None, user)
    assert "cart_merged" not in without.json()


def test_register_with_a_cart_token_merges_it_too(redis):
    product_with_stock(sku="A", available=5)
    token = guest_cart({"A": 2})
    response = APIClient().post(
        "/api/auth/register", {"username": "newbie", "password": PASSWORD}, format="json", HTTP_CART_TOKEN=token
    )
    assert response.status_code == 201 and response.json()["cart_merged"] == 1
    shopper = get_user_model().objects.get(username="newbie")
    assert redis.hgetall(cart_key(shopper.id)) == {b"A": b"2"}


def test_the_merge_keeps_the_line_cap(redis, settings):
    settings.CART_MAX_LINES = 3
    for sku in ("A", "B", "C", "D"):
        product_with_stock(sku=sku, available=5)
    user = UserFactory()
    fill_cart(redis, user.id, {"A": 1, "B": 1})
    token = guest_cart({"C": 1, "D": 1, "A": 4})
    response, _ = login(token, user)
    assert response.json()["cart_merged"] == 2  # A (larger wins) and C; D found no room
    assert {k.decode(): int(v) for k, v in redis.hgetall(cart_key(user.id)).items()} == {"A": 4, "B": 1, "C": 1}


@pytest.mark.django_db(transaction=True)
def test_two_logins_racing_with_one_guest_cart_merge_it_once(redis):
    product_with_stock(sku="A", available=5)
    user = UserFactory()
    token = guest_cart({"A": 3})
    fill_cart(redis, user.id, {})
    results = run_in_threads([lambda: login(token, user)[0].json()["cart_merged"] for _ in range(6)])
    assert sorted(results) == [0, 0, 0, 0, 0, 1]
    assert redis.hgetall(cart_key(user.id)) == {b"A": b"3"}


def test_a_shopper_token_wins_over_a_cart_token(redis):
    product_with_stock(sku="A", available=5)
    token = guest_cart({"A": 2})
    client = shopper_client()
    assert client.get("/api/cart", HTTP_CART_TOKEN=token).json()["items"] == []
    assert put(client, "A", 1, token).status_code == 200 and "Cart-Token" not in put(client, "A", 1, token)
    assert APIClient().get("/api/cart", HTTP_CART_TOKEN=token).json()["items"][0]["quantity"] == 2


def test_a_guest_cart_written_once_lives_an_hour_and_one_address_starts_few_a_day(redis, settings):
    product_with_stock(sku="A", available=5)
    token = guest_cart({"A": 1})
    cart, live = guest_cart_keys(_guest_digest(token))
    assert 0 < redis.ttl(cart) <= 3600 and 0 < redis.ttl(live) <= 3600  # GUEST_CART_NEW_TTL_SECONDS
    assert put(APIClient(), "A", 2, token).status_code == 200  # written again: a shopper, not a flood
    assert redis.ttl(cart) > 6 * 24 * 3600 and redis.ttl(live) > 6 * 24 * 3600

    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "guest_cart_new": "3/day", "guest_cart_address": "1000/min"}
    one = "192.0.2.7"
    first = put(APIClient(REMOTE_ADDR=one), "A", 1)
    statuses = [first.status_code] + [put(APIClient(REMOTE_ADDR=one), "A", 1).status_code for _ in range(3)]
    assert statuses == [200, 200, 200, 429]  # new carts (fresh tokens) from one address
    refused = put(APIClient(REMOTE_ADDR=one), "A", 1)
    assert refused.json()["error"]["code"] == "rate_limited"
    assert put(APIClient(REMOTE_ADDR=one), "A", 3, first["Cart-Token"]).status_code == 200  # its carts go on
    assert put(APIClient(REMOTE_ADDR="203.0.113.7"), "A", 1).status_code == 200  # another address
