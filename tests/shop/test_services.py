"""shop/services.py set_password: the one way a password changes, revoking the
user's tokens (but the session's that changed it) before the change commits."""

import io

import pytest
from knox.models import AuthToken
from redis.exceptions import ConnectionError as RedisConnectionError

from core.authentication import token_digest
from shop.services import set_password
from tests.factories import PASSWORD, api_token, product_with_stock
from tests.helpers import client_with

pytestmark = pytest.mark.django_db


def test_set_password_revokes_every_token_at_once(user, redis, django_capture_on_commit_callbacks):
    product_with_stock(sku="MUG")
    client = client_with(api_token(user))
    assert client.put("/api/cart/items/MUG", {"quantity": 1}).status_code == 200  # cached everywhere
    generation = int(redis.get("shop:cache-generation") or 0)
    with django_capture_on_commit_callbacks(execute=True):
        set_password(user=user, password="a-brand-new-passphrase")
    assert client.get("/api/cart").status_code == 401
    assert client.get("/api/auth/me").status_code == 401
    assert not AuthToken.objects.filter(user=user).exists()
    assert int(redis.get("shop:cache-generation")) > generation
    user.refresh_from_db()
    assert user.check_password("a-brand-new-passphrase")


def test_set_password_keeps_the_token_of_the_session_that_changed_it(user, django_capture_on_commit_callbacks):
    this, other = api_token(user), api_token(user)
    kept = AuthToken.objects.get(digest=token_digest(this))
    with django_capture_on_commit_callbacks(execute=True):
        set_password(user=user, password="a-brand-new-passphrase", keep_token=kept)
    assert client_with(this).get("/api/cart").status_code == 200
    assert client_with(other).get("/api/cart").status_code == 401
    assert list(AuthToken.objects.filter(user=user)) == [kept]


def test_set_password_to_none_disables_password_login_and_revokes(user, django_capture_on_commit_callbacks):
    client = client_with(api_token(user))
    with django_capture_on_commit_callbacks(execute=True):
        set_password(user=user, password=None)
    user.refresh_from_db()
    assert not user.has_usable_password() and client.get("/api/cart").status_code == 401


def test_set_password_changes_nothing_when_redis_cannot_hear_of_it(user, monkeypatch):
    api_token(user)

    def down(self, *names):
        raise RedisConnectionError("Redis is restarting")

    monkeypatch.setattr("redis.Redis.delete", down)
    with pytest.raises(RedisConnectionError):
        set_password(user=user, password="a-brand-new-passphrase")
    user.refresh_from_db()
    assert user.check_password(PASSWORD) and AuthToken.objects.filter(user=user).count() == 1


def test_changepassword_from_the_shell_revokes_the_users_tokens(user, monkeypatch, django_capture_on_commit_callbacks):
    from django.contrib.auth.management.commands.changepassword import Command as DjangoCommand
    from django.core.management import call_command

    product_with_stock(sku="MUG")
    client = client_with(api_token(user))
    assert client.get("/api/cart").status_code == 200
    monkeypatch.setattr(DjangoCommand, "_get_pass", lambda self, prompt="Password: ": "a-brand-new-passphrase")
    with django_capture_on_commit_callbacks(execute=True):
        call_command("changepassword", user.username, stdout=io.StringIO())
    assert client.get("/api/cart").status_code == 401
    user.refresh_from_db()
    assert user.check_password("a-brand-new-passphrase")
