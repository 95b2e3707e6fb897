"""An account the shopper controls: the saved address, a password change, logout
and deactivation taking effect at once on every path."""

import pytest
from knox.models import AuthToken

from shop.models import Address
from tests.factories import PASSWORD, SHIPPING_ADDRESS, ShopperWithoutAddressFactory, api_token
from tests.helpers import client_with

pytestmark = pytest.mark.django_db


@pytest.fixture
def shopper():
    user = ShopperWithoutAddressFactory()
    client = client_with(api_token(user))
    client.user = user
    return client


def test_the_default_address_is_saved_and_read_back(shopper):
    assert shopper.get("/api/auth/me/address").status_code == 404
    saved = shopper.put("/api/auth/me/address", {**SHIPPING_ADDRESS, "country": "fr"}, format="json")
    assert saved.status_code == 200 and saved.json() == {**SHIPPING_ADDRESS, "country": "FR"}
    assert shopper.get("/api/auth/me/address").json()["country"] == "FR"
    changed = shopper.put("/api/auth/me/address", {**SHIPPING_ADDRESS, "city": "Sevilla"}, format="json")
    assert changed.json()["city"] == "Sevilla" and Address.objects.count() == 1


def test_an_address_redis_cannot_forget_is_not_saved(shopper, monkeypatch):
    """Redis keeps the saved address for checkout: when it cannot drop the old
    one, the save is refused (503) and the database keeps what it had, so a
    checkout never ships to a replaced address."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    assert shopper.put("/api/auth/me/address", SHIPPING_ADDRESS, format="json").status_code == 200

    def down(self, *names):
        raise RedisConnectionError("Redis is restarting")

    monkeypatch.setattr("redis.Redis.delete", down)
    refused = shopper.put("/api/auth/me/address", {**SHIPPING_ADDRESS, "city": "Sevilla"}, format="json")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "cache_unavailable"
    assert Address.objects.get(customer=shopper.user).city == SHIPPING_ADDRESS["city"]


@pytest.mark.parametrize(
    "field, value",
    [
        ("country", "XX"),
        ("country", "ESP"),
        ("country", ""),
        ("phone", "call me"),
        ("phone", "1" * 21),
        ("name", ""),
        ("line1", None),
        ("city", "x" * 101),
        ("postal_code", 12345678901234567890123),
        ("line2", []),
    ],
)
def test_each_bad_field_is_a_400_naming_it(shopper, field, value):
    response = shopper.put("/api/auth/me/address", {**SHIPPING_ADDRESS, field: value}, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["details"], response.content
    assert not Address.objects.exists()


def test_a_missing_field_and_a_non_object_are_400s(shopper):
    without_city = {k: v for k, v in SHIPPING_ADDRESS.items() if k != "city"}
    assert "city" in shopper.put("/api/auth/me/address", without_city, format="json").json()["error"]["details"]
    assert shopper.put("/api/auth/me/address", [1, 2], format="json").status_code == 400
    assert shopper.put("/api/auth/me/address", "x", format="json").status_code == 400


def test_a_password_change_keeps_this_session_and_ends_the_others(api_client, shopper):
    other = client_with(api_token(shopper.user))
    assert other.get("/api/cart").status_code == 200  # cached in this process and in Redis
    body = {"old_password": PASSWORD, "new_password": "a-brand-new-passphrase"}
    assert shopper.post("/api/auth/password", body, format="json").status_code == 204
    assert other.get("/api/cart").status_code == 401 and other.get("/api/orders").status_code == 401
    assert shopper.get("/api/cart").status_code == 200 and shopper.get("/api/auth/me").status_code == 200
    assert AuthToken.objects.filter(user=shopper.user).count() == 1
    login = {"username": shopper.user.username, "password": "a-brand-new-passphrase"}
    assert api_client.post("/api/auth/token", login, format="json").status_code == 200


def test_a_wrong_or_weak_password_changes_nothing(shopper):
    wrong = shopper.post("/api/auth/password", {"old_password": "nope", "new_password": "x-y-z-long-enough"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "wrong_password"
    weak = shopper.post("/api/auth/password", {"old_password": PASSWORD, "new_password": "123"}, format="json")
    assert weak.status_code == 400
    shopper.user.refresh_from_db()
    assert shopper.user.check_password(PASSWORD)
    assert shopper.post("/api/auth/password", {"old_password": PASSWORD}, format="json").status_code == 400


def test_logout_ends_the_token_at_once_on_every_path_of_every_process(shopper):
    for path in ("/api/cart", "/api/orders", "/api/auth/me"):
        assert shopper.get(path).status_code == 200  # the token cached in this process
    assert shopper.post("/api/auth/logout").status_code == 204
    for path in ("/api/cart", "/api/orders", "/api/auth/me", "/api/auth/me/address"):
        assert shopper.get(path).status_code == 401, path


def test_deactivation_ends_the_token_at_once_on_the_orders_list(shopper, django_capture_on_commit_callbacks):
    assert shopper.get("/api/orders").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        shopper.user.is_active = False
        shopper.user.save()
    assert shopper.get("/api/orders").status_code == 401
