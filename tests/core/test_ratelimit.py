"""core/ratelimit.py: the checkout, cart-write and login limits, counted per shopper
or per client address, and an address a client cannot make up."""

import pytest

from tests.factories import product_with_stock
from tests.helpers import checkout, failed_api_login, shopper_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth_limit(settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "auth": "5/min"}


def test_checkout_rate_limit_is_429_with_retry_after(redis, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "checkout": "2/min"}
    shopper = shopper_client()
    statuses = [checkout(shopper, key=f"k{i}").status_code for i in range(2)]
    assert statuses == [422, 422]  # empty cart, but counted
    response = checkout(shopper, key="k3")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert shopper_client().post("/api/orders", HTTP_IDEMPOTENCY_KEY="x").status_code == 422  # per shopper


def test_auth_rate_limit_is_per_ip(api_client, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "auth": "3/min"}
    for _ in range(3):
        assert api_client.post("/api/auth/token", {"username": "x", "password": "y"}).status_code == 401
    response = api_client.post("/api/auth/token", {"username": "x", "password": "y"})
    assert response.status_code == 429 and "Retry-After" in response.headers
    other_ip = api_client.post("/api/auth/token", {"username": "x", "password": "y"}, REMOTE_ADDR="10.9.9.9")
    assert other_ip.status_code == 401


def test_cart_write_rate_limit(auth_client, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "cart_write": "1/min"}
    product_with_stock(sku="A")
    assert auth_client.put("/api/cart/items/A", {"quantity": 1}, format="json").status_code == 200
    assert auth_client.put("/api/cart/items/A", {"quantity": 2}, format="json").status_code == 429
    assert auth_client.get("/api/cart").status_code == 200  # reads are not limited


def test_a_made_up_x_forwarded_for_does_not_escape_the_login_limit(client, auth_limit):
    statuses = [failed_api_login(client, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code for n in range(25)]
    assert statuses[:5] == [401] * 5
    assert set(statuses[5:]) == {429}


def test_behind_one_trusted_proxy_the_address_it_saw_is_the_client(client, auth_limit, settings):
    settings.TRUSTED_PROXIES = 1
    # The client's own words come first; the proxy appends the address it saw.
    same_client = [failed_api_login(client, HTTP_X_FORWARDED_FOR=f"10.6.6.{n}, 198.51.100.7") for n in range(6)]
    assert [r.status_code for r in same_client] == [401] * 5 + [429]
    assert failed_api_login(client, HTTP_X_FORWARDED_FOR="198.51.100.8").status_code == 401  # another client
    assert failed_api_login(client, HTTP_X_FORWARDED_FOR="not-an-address").status_code == 401  # the peer's window
    assert [failed_api_login(client).status_code for _ in range(5)] == [401] * 4 + [429]  # the peer's, too


def test_an_ipv6_client_counts_as_its_64_whatever_host_part_it_picks(client, auth_limit):
    """A subscriber is handed a /64 and may send from any of its 2^64 addresses:
    the limits count the network, not the address."""
    statuses = [failed_api_login(client, REMOTE_ADDR=f"2001:db8:1:2::{n:x}").status_code for n in range(6)]
    assert statuses == [401] * 5 + [429]
    assert failed_api_login(client, REMOTE_ADDR="2001:db8:1:3::1").status_code == 401  # the next /64: another client
    assert failed_api_login(client, REMOTE_ADDR="::ffff:198.51.100.9").status_code == 401  # IPv4, as IPv4


def test_the_holder_of_an_address():
    from types import SimpleNamespace

    from core.ratelimit import client_address

    def seen(peer):
        return client_address(SimpleNamespace(META={"REMOTE_ADDR": peer}))

    assert seen("2001:db8:1:2:aaaa:bbbb:cccc:dddd") == "2001:db8:1:2::/64"
    assert seen("198.51.100.7") == "198.51.100.7" == seen("::ffff:198.51.100.7")
    assert seen("") == ""  # no peer (a test client, a Unix socket): as it came
