"""shop/signals.py: a changed user leaves every cache before it commits, without
reading its stored password first, and a login, touching only last_login, none.
(A password change revokes the tokens in shop/services.py: tests/shop/test_services.py.)"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from knox.models import AuthToken

from core.hotcache import hot_cache
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
