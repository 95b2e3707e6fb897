import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from cart.storage import cart_key
from tests.factories import UserFactory, api_token


def fill_cart(redis, customer_id: int, lines: dict[str, int]) -> None:
    redis.delete(cart_key(customer_id))
    if lines:
        redis.hset(cart_key(customer_id), mapping=lines)


def checkout(client, key="key-1"):
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key) if key is not None else client.post("/api/orders")


def shopper_client(user=None) -> APIClient:
    user = user or UserFactory()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
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


def place_pending_order(redis, customer, lines: dict[str, int], key: str | None = None):
    """A real order through place_order, as checkout makes it."""
    from orders.services import place_order

    fill_cart(redis, customer.id, lines)
    return place_order(customer_id=customer.id, idempotency_key=key or f"k-{customer.id}-{sorted(lines)}").order


def expire_now(*orders) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from orders.models import Order

    Order.objects.filter(id__in=[o.id for o in orders]).update(expires_at=timezone.now() - timedelta(seconds=1))


def post_webhook(client, *, payment_id, order_id, amount, currency="EUR", status="succeeded", secret=None, t=None):
    import json

    from django.conf import settings

    from orders.signatures import sign

    body = json.dumps(
        {"payment_id": payment_id, "order_id": order_id, "amount": amount, "currency": currency, "status": status}
    ).encode()
    signature = sign(body=body, secret=secret or settings.PAYMENT_WEBHOOK_SECRET, timestamp=t)
    return client.post(
        "/api/payments/webhook", body, content_type="application/json", HTTP_PAYMENT_SIGNATURE=signature
    )
