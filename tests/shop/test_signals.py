"""shop/signals.py: a changed user leaves every cache before it commits, without
reading its stored password first, and a login, touching only last_login, none;
a saved or deleted tax or shipping row moves the generation.
(A password change revokes the tokens in shop/services.py: tests/shop/test_services.py.)"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from knox.models import AuthToken

from core.hotcache import hot_cache
from shop.models import ShippingMethod, ShippingRateBand, ShippingZone, TaxClass, TaxRate
from tests.factories import api_token
from tests.helpers import client_with

pytestmark = pytest.mark.django_db


def test_a_user_save_reads_no_password_and_still_drops_the_tokens(user, redis, django_capture_on_commit_callbacks):
    client = client_with(api_token(user))
    assert client.get("/api/cart").status_code == 200  # the token now in Redis
    key = f"auth:token:{AuthToken.objects.get(user=user).digest}"
    assert redis.exists(key)
    generation = int(redis.get("shop:cache-generation") or 0)
    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
        user.first_name = "Ada"
        user.save()
    statements = [query["sql"] for query in queries]
    assert [sql.split()[0] for sql in statements] == ["UPDATE", "SELECT"], statements  # the user; its tokens
    assert "auth_user" not in statements[1] and "knox_authtoken" in statements[1]
    assert not redis.exists(key)
    assert int(redis.get("shop:cache-generation")) == generation + 2  # before the commit and after
    assert client.get("/api/cart").status_code == 200  # not revoked: a name change ends no session


def test_deactivation_refuses_the_token(user, django_capture_on_commit_callbacks):
    client = client_with(api_token(user))
    assert client.get("/api/cart").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        user.is_active = False
        user.save()
    assert client.get("/api/cart").status_code == 401
    hot_cache.tokens.clear()
    assert client.get("/api/cart").status_code == 401


def test_a_login_only_touching_last_login_keeps_the_caches(api_client, user, redis):
    client = client_with(api_token(user))
    assert client.get("/api/cart").status_code == 200
    generation = redis.get("shop:cache-generation")
    body = {"username": user.username, "password": "correct-horse-battery"}
    assert api_client.post("/api/auth/token", body, format="json").status_code == 200
    assert redis.get("shop:cache-generation") == generation


def test_saving_or_deleting_tax_and_shipping_rows_moves_the_generation(redis, django_capture_on_commit_callbacks):
    """The cart and checkout keep rates and methods in process memory: any change drops them everywhere."""

    def moves(change) -> int:
        before = int(redis.get("shop:cache-generation") or 0)
        with django_capture_on_commit_callbacks(execute=True):
            change()
        return int(redis.get("shop:cache-generation")) - before

    made = {}
    creations = {
        "class": lambda: TaxClass.objects.create(code="books", name="Books"),
        "rate": lambda: TaxRate.objects.create(country="GB", tax_class_id="books", rate=0, valid_from="2026-01-01"),
        "zone": lambda: ShippingZone.objects.create(name="UK", countries=["GB"]),
        "method": lambda: ShippingMethod.objects.create(code="parcel", name="Parcel", zone=made["zone"]),
        "band": lambda: ShippingRateBand.objects.create(method=made["method"], up_to_grams=1000, price=500),
    }
    for name, create in creations.items():
        assert moves(lambda name=name, create=create: made.update({name: create()})) == 2, name  # before and after
    for name, row in made.items():
        assert moves(row.save) == 2, name
    for name in ["band", "rate", "method", "zone", "class"]:  # the referring rows first (PROTECT)
        assert moves(made[name].delete) == 2, name
