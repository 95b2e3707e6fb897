"""core/authentication.py: token authentication without SQL once a token was issued
or seen (process memory, then Redis, then the database), that keeps digests, never
tokens, and checks expiry and well-formedness at every step."""

from datetime import timedelta

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from core import authentication
from core.authentication import token_digest
from core.hotcache import hot_cache
from tests.factories import api_token, product_with_stock
from tests.helpers import client_with, wall_clock_ahead

pytestmark = pytest.mark.django_db


def put(client, sku, quantity):
    return client.put(f"/api/cart/items/{sku}", {"quantity": quantity}, format="json")


@pytest.mark.parametrize("header", ["Token \u00e9\u00e9", "Token " + "g" * 64, "Token " + "a" * 63, "Token a b"])
def test_a_malformed_token_is_401_without_a_query(api_client, header, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = api_client.get("/api/cart", HTTP_AUTHORIZATION=header.encode().decode("latin-1"))
    assert response.status_code == 401


def test_redis_keeps_digests_never_tokens(user, redis):
    token = api_token(user)
    client = client_with(token)
    assert client.get("/api/cart").status_code == 200
    keys = [key.decode() for key in redis.keys("auth:token:*")]
    assert keys == [f"auth:token:{token_digest(token)}"]
    assert not any(token in key or token.encode() in redis.get(key) for key in keys)


@pytest.mark.parametrize("path", ["/api/cart", "/api/auth/me"])
def test_an_expired_token_is_refused_even_when_cached(user, path, monkeypatch):
    _, token = AuthToken.objects.create(user=user, expiry=timedelta(minutes=1))
    client = client_with(token)
    assert client.get(path).status_code == 200  # in this process's cache and in Redis now
    # A second past its expiry for every expiry check (knox's and the caches'); the
    # process's cache still holds the token (it keeps it by the monotonic clock).
    wall_clock_ahead(monkeypatch, 61, authentication)
    assert client.get(path).status_code == 401


def test_token_seen_by_one_process_costs_another_no_sql(auth_client, django_assert_num_queries):
    product = product_with_stock()
    put(auth_client, product.sku, 1)  # this "process" loaded the token into Redis
    hot_cache.tokens.clear()  # another worker: its own memory is cold, Redis is shared
    with django_assert_num_queries(0):
        assert put(auth_client, product.sku, 2).status_code == 200


def test_deleted_token_is_dropped_from_redis_too(auth_client, django_capture_on_commit_callbacks):
    product = product_with_stock()
    put(auth_client, product.sku, 1)
    with django_capture_on_commit_callbacks(execute=True):
        AuthToken.objects.get(user=auth_client.user).delete()
    hot_cache.tokens.clear()
    assert put(auth_client, product.sku, 2).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_issued_token_is_written_through_to_redis(redis, django_assert_num_queries):
    client = APIClient()
    token = client.post(
        "/api/auth/register", {"username": "fresh", "password": "analytical-engine-1843"}, format="json"
    ).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    hot_cache.tokens.clear()  # a worker that never saw this shopper
    with django_assert_num_queries(0):
        assert client.get("/api/cart").status_code == 200


@pytest.mark.parametrize("token", ["0" * 64, "a1" * 32, "\u00e9t\u00e9", ""])
def test_token_digest_is_knoxs_hash(token):
    from knox.crypto import hash_token

    assert token_digest(token) == hash_token(token)
