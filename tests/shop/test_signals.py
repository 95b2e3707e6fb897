"""shop/signals.py: a changed password or user leaves every cache before it commits
(a password change ends every session), and a login, touching only last_login, none."""

import pytest
from knox.models import AuthToken

from core.hotcache import hot_cache
from tests.factories import api_token, product_with_stock
from tests.helpers import client_with

pytestmark = pytest.mark.django_db


def test_a_password_change_revokes_every_token_at_once(user, django_capture_on_commit_callbacks):
    product_with_stock(sku="MUG")
    client = client_with(api_token(user))
    assert client.put("/api/cart/items/MUG", {"quantity": 1}).status_code == 200  # cached everywhere
    with django_capture_on_commit_callbacks(execute=True):
        user.set_password("a-brand-new-passphrase")
        user.save()
    assert client.get("/api/cart").status_code == 401
    assert client.get("/api/auth/me").status_code == 401
    assert not AuthToken.objects.filter(user=user).exists()


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
