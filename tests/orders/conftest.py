import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from inventory.models import Stock
from inventory.services.flash_sales import seed_flash_sale
from orders import apis
from orders.models import Order
from orders.queue_producer import forget_queue_producer
from orders.queue_writer import QueueWriter
from orders.services import queue_admission
from orders.services.queue_admission import queue_depths
from outbox.topics import ensure_topics
from tests.factories import UserFactory, product_with_stock
from tests.helpers import fill_cart, place_pending_order, shopper_client, wait_until


@pytest.fixture
def order(redis):
    """A pending order of 2 x "A" at 250 (10 in stock), as checkout places it."""
    product_with_stock(sku="A", price=250, available=10)
    return place_pending_order(redis, UserFactory(), {"A": 2})


# --- queue-mode flash sales (test_queue.py, test_queue_producer.py: use the queue_topic fixture) ---

_topics = itertools.count()
SKU = "FLASH-Q"


@pytest.fixture
def queue_topic(settings, run_id):
    """A checkout topic and writer group of this test's own; a fresh producer, and a
    fresh block of order ids (the process keeps one: a test that counts the statements
    taking ids, or expects them in a row, does not start on one another test left)."""
    topic = f"test.{run_id}.checkout.{next(_topics)}"
    settings.KAFKA_CHECKOUT_TOPIC = topic
    settings.KAFKA_CONSUMER_GROUP_PREFIX = f"{topic}."
    ensure_topics(topics=[topic])
    forget_queue_producer()
    queue_admission._ids = queue_admission._IdBlock()
    yield topic
    forget_queue_producer()
    queue_admission._ids = queue_admission._IdBlock()


def queue_sale(stock: int, *, mode: str = "queue", limit: int | None = None) -> None:
    seed_flash_sale(sku=SKU, stock=stock, price=500, name="Flash", per_customer_limit=limit, mode=mode)


def checkout(client, key: str):
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key)


def shopper_with_cart(redis, lines=None):
    client = shopper_client()
    fill_cart(redis, client.user.id, lines or {SKU: 1})
    return client


def drain(expected_orders: int, *, timeout: float = 30.0) -> QueueWriter:
    """Run a writer until `expected_orders` orders exist and the queue is empty: every
    request admitted through the API handled (written, rejected or found written; none
    pending in Redis), the last batch's clean-up done and its offsets committed."""
    writer = QueueWriter()

    def empty() -> bool:
        return writer.run_once() == 0 and Order.objects.count() >= expected_orders and not any(queue_depths().values())

    try:
        assert wait_until(empty, timeout), f"{Order.objects.count()} orders, pending {queue_depths()}"
    finally:
        writer.close()
    return writer


def stock() -> tuple[int, int]:
    row = Stock.objects.get(product_id=SKU)
    return row.available, row.reserved


# --- the payment provider (test_payment_lifecycle.py, test_admin_payments.py) -------------------


class PaymentProvider:
    """A payment provider on a real socket, speaking the simulator's protocol: a
    session per idempotency key (the same answer for the same key), captures and
    voids answered at once; every call recorded (path, key, body). `unavailable`
    answers 503 that many times."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        self.sessions: dict[str, dict] = {}
        self.unavailable = 0
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key, path = self.headers["Idempotency-Key"], self.path.rsplit("/", 1)[-1]
                with provider.lock:
                    provider.calls.append((path, key, body))
                    status, answer = (503, {"error": "down"}) if provider.unavailable else (200, None)
                    provider.unavailable = max(0, provider.unavailable - 1)
                    if status == 200 and path == "sessions":
                        answer = provider.sessions.setdefault(
                            key,
                            {
                                "id": f"ps_{len(provider.sessions) + 1}",
                                "expires_at": body["expires_at"],
                                "pay_url": f"{provider.url}/pay/ps_{len(provider.sessions) + 1}",
                            },
                        )
                    elif status == 200:
                        answer = {"id": body["payment_id"], "status": "captured" if path == "captures" else "voided"}
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(answer).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()  # quick to shut down

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def called(self, path: str) -> list[tuple[str, dict]]:
        return [(key, body) for called, key, body in self.calls if called == path]


@pytest.fixture
def provider(settings):
    """The fake provider on a socket of this test's own (test_refunds.py has its own, for refunds only)."""
    running = PaymentProvider()
    settings.PAYMENT_PROVIDER_URL = running.url
    yield running
    running.stop()


@pytest.fixture
def views(monkeypatch) -> list[int]:
    """Customer ids of the checkouts that reached the view (the ordinary path: test_early_refusal.py,
    test_sold_out_memory.py)."""
    reached, real = [], apis.place_order

    def place_order(**kwargs):
        reached.append(kwargs["customer_id"])
        return real(**kwargs)

    monkeypatch.setattr(apis, "place_order", place_order)
    return reached


@pytest.fixture(autouse=True)
def no_uncounted_refusals():
    """Refusals another test answered from memory and left for the gate's next call: not this test's."""
    from orders.services import admission

    admission.refusal_memory.take()
    yield
    admission.refusal_memory.take()


@pytest.fixture
def gate_apart(redis, settings):
    """The gate on a database of its own (shares_cart_redis() is False), emptied around the test."""
    server, db = settings.CACHES["default"]["LOCATION"].rsplit("/", 1)
    own = f"{server}/{14 if db == '13' else 13}"
    settings.CACHES = {**settings.CACHES, "gate": {**settings.CACHES["gate"], "LOCATION": own}}
    from inventory import gate

    assert not gate.shares_cart_redis()
    gate.connection().flushdb()
    yield int(own.rsplit("/", 1)[1])
    gate.connection().flushdb()
