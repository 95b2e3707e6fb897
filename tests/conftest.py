import threading
import uuid

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.test import TransactionTestCase
from django_redis import get_redis_connection
from rest_framework.test import APIClient

from core.hotcache import hot_cache
from tests.factories import UserFactory, api_token, product_with_stock
from tests.helpers import place_pending_order, shopper_client, staff_client

KEPT_BY_TEARDOWN = {"django_content_type", "auth_permission", "django_migrations"}


def _delete_every_row(self) -> None:
    """A transactional test's teardown: every row of every model's table deleted
    in one transaction (foreign keys are deferrable), content types and
    permissions kept. Django's own flush TRUNCATEs the 43 tables and emits
    post_migrate to make the content types and permissions again: 619 ms a test
    against 4 ms, over two minutes of the suite. Sequences are not reset either way."""
    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        quote = connection.ops.quote_name
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            for table in sorted(set(tables) - KEPT_BY_TEARDOWN):
                cursor.execute(f"DELETE FROM {quote(table)}")


TransactionTestCase._fixture_teardown = _delete_every_row


@pytest.fixture(autouse=True)
def redis():
    """The tests' own Redis database (settings.TESTING), empty for every test."""
    assert not settings.REDIS_URL.endswith(("/0", "/1")), "tests must not touch the development Redis databases"
    conn = get_redis_connection("default")
    conn.flushdb()
    hot_cache.clear()  # its generation lived in the Redis just flushed
    yield conn
    conn.flushdb()
    hot_cache.clear()


@pytest.fixture(autouse=True)
def tax_classes(request):
    """The tax classes migration shop/0016 creates (every product is `standard`
    unless told otherwise), again for a test after a transactional one, whose
    flush deleted them."""
    if request.node.get_closest_marker("django_db") is None and not {"db", "transactional_db"} & set(
        request.fixturenames
    ):
        return
    request.getfixturevalue("db")
    from shop.models import TaxClass

    names = {"standard": "Standard rate", "reduced": "Reduced rate", "zero": "Zero rate"}
    TaxClass.objects.bulk_create([TaxClass(code, name) for code, name in names.items()], ignore_conflicts=True)


@pytest.fixture(autouse=True)
def one_middleware_chain():
    """The test clients share one middleware chain, as one WSGI handler serves
    every thread in production. Each client loading its own cost ~50 ms
    (WhiteNoise lists the static files), and 200 clients racing to load theirs
    was half of a concurrency test's time. Any setting changed drops it: the next
    client to load its middleware (a new client, as with stock Django) reads the
    settings as they are then."""
    from django.core.signals import setting_changed
    from django.test.client import ClientHandler

    loaded, lock, real = {}, threading.Lock(), ClientHandler.load_middleware
    parts = ("_view_middleware", "_template_response_middleware", "_exception_middleware", "_middleware_chain")

    def load_middleware(self, is_async=False):
        with lock:
            if is_async not in loaded:
                real(self, is_async)
                loaded[is_async] = [getattr(self, part) for part in parts]
            for part, value in zip(parts, loaded[is_async], strict=True):
                setattr(self, part, value)

    def forget(**kwargs):
        loaded.clear()

    ClientHandler.load_middleware = load_middleware
    setting_changed.connect(forget, weak=False)
    yield
    setting_changed.disconnect(forget)
    ClientHandler.load_middleware = real


@pytest.fixture(autouse=True)
def fresh_probes():
    """/readyz and /metrics keep their last answer a few seconds: not from one test to the next."""
    from config.health import forget_last_probe
    from config.metrics import LiveStateCollector

    forget_last_probe()
    LiveStateCollector._cached = None


@pytest.fixture(autouse=True)
def fresh_queue_producer():
    """The process's queue producer (orders.queue_producer), and so its circuit breaker,
    is made anew on first use in each test: a breaker opened by one test (a broker it
    stopped, a bootstrap address where nothing listens) does not refuse the next one's
    queue checkouts, and a producer built on one test's settings serves no other."""
    from orders.queue_producer import forget_queue_producer

    forget_queue_producer()
    yield
    forget_queue_producer()


@pytest.fixture(autouse=True)
def generous_rate_limits(settings):
    """Rate limits out of the way; tests of the limits set their own."""
    settings.RATE_LIMITS = {"checkout": "100000/min", "cart_write": "100000/min", "auth": "100000/min"}


@pytest.fixture(autouse=True)
def generous_holds(settings):
    """Unpaid-hold caps out of the way; tests of hoarding set their own."""
    settings.MAX_UNPAID_UNITS_PER_SKU = settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1_000_000


@pytest.fixture(autouse=True)
def consumer_handlers():
    """The consumers' handler registry (outbox.consumers.HANDLERS) as the apps left it,
    whatever a test registers: restored in place, since the runner reads that very dict."""
    from outbox.consumers import HANDLERS

    saved = {consumer: dict(handlers) for consumer, handlers in HANDLERS.items()}
    yield HANDLERS
    HANDLERS.clear()
    HANDLERS.update(saved)


@pytest.fixture(autouse=True)
def quick_provider_retries(monkeypatch):
    """The simulator's client retries as in production (3 times on a
    connection error or a 5xx) without the waits between: the same calls, a
    second less per test that takes the provider down."""
    import urllib3

    from orders import provider_simulator as provider

    retries = provider._http.connection_pool_kw["retries"].new(backoff_factor=0)
    monkeypatch.setattr(
        provider, "_http", urllib3.PoolManager(timeout=provider._http.connection_pool_kw["timeout"], retries=retries)
    )


@pytest.fixture
def api_client():
    return APIClient()


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def auth_client(user):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    client.user = user
    return client


@pytest.fixture
def shopper(db):
    """An API client of a new shopper (client.user), for the checkout and order APIs."""
    return shopper_client()


@pytest.fixture
def stock_manager(db):
    """A staff client in the "Stock managers" group."""
    return staff_client("Stock managers")


@pytest.fixture
def order_manager(db):
    """A staff client in the "Order managers" group."""
    return staff_client("Order managers")


@pytest.fixture
def placed_order(redis, db):
    """A pending order of buyer@example.com: 2 x "A" at 1250 (the order
    tests.helpers.order_paid_event and refund_requested_event describe)."""
    product_with_stock(sku="A", price=1250, available=5)
    return place_pending_order(redis, UserFactory(email="buyer@example.com"), {"A": 2})


@pytest.fixture(scope="session")
def run_id():
    """Unique per test run, for Kafka topic names that must not collide."""
    return uuid.uuid4().hex[:10]
