import threading

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cart.storage import cart_key
from tests.factories import UserFactory


def fill_cart(redis, customer_id: int, lines: dict[str, int]) -> None:
    redis.delete(cart_key(customer_id))
    if lines:
        redis.hset(cart_key(customer_id), mapping=lines)


def checkout(client, key="key-1"):
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key) if key is not None else client.post("/api/orders")


def shopper_client(user=None) -> APIClient:
    user = user or UserFactory()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    client.user = user
    return client


def run_in_threads(targets):
    """Start every callable at the same moment, each thread with its own DB connection."""
    barrier = threading.Barrier(len(targets))
    results = [None] * len(targets)
    errors = []

    def run(i, target):
        try:
            barrier.wait()
            results[i] = target()
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


@pytest.fixture
def shopper(db):
    return shopper_client()
