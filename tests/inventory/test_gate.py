"""inventory/gate.py: the Redis gate in front of a flash sale's checkouts: all or
nothing per cart, units given back when the database refuses or an order ends, fail
closed without its Redis, and no SQL for a refused shopper."""

import threading

import pytest
from django.db import connection

from core.authentication import CachedTokenAuthentication
from inventory import gate
from inventory.models import Stock
from inventory.services.flash_sales import gate_rules, gate_rules_in_memory, gated_skus
from orders.models import Order
from orders.services import checkout as checkout_service
from tests.factories import UserFactory, product_with_stock
from tests.helpers import checkout, fill_cart, redis_commands, run_in_threads, shopper_client
from tests.inventory.conftest import counter, seed

pytestmark = pytest.mark.django_db


def test_refused_checkout_makes_zero_sql_queries(redis, django_assert_num_queries):
    seed(stock=0)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper, key="warm").status_code == 409  # warms token and flash-sale caches
    with django_assert_num_queries(0):
        response = checkout(shopper, key="refused")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "sold_out"
    assert response.json()["error"]["details"] == {"sku": "HOT"}


def test_gate_is_all_or_nothing_for_a_multi_sku_cart(redis):
    seed(sku="A", stock=5)
    seed(sku="B", stock=0)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"A": 2, "B": 1})
    response = checkout(shopper)
    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"sku": "B"}
    assert counter("A") == 5
    assert Stock.objects.get(product_id="A").available == 5


def test_gate_gives_units_back_when_the_database_refuses(redis):
    seed(stock=5)
    Stock.objects.filter(product_id="HOT").update(available=0)  # the DB knows better than the gate
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 2})
    response = checkout(shopper)
    assert response.status_code == 409 and response.json()["error"]["code"] == "out_of_stock"
    assert counter() == 5
    assert not gate.connection().hget(gate.bought_key("HOT"), shopper.user.id)


def test_replay_does_not_consume_gate_units(redis, django_capture_on_commit_callbacks):
    seed(stock=5)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(shopper, key="once").status_code == 201
    assert counter() == 4
    fill_cart(redis, shopper.user.id, {"HOT": 1})  # the same cart again, the same key
    response = checkout(shopper, key="once")
    assert response.status_code == 200 and response.headers["Idempotent-Replayed"] == "true"
    assert counter() == 4
    fill_cart(redis, shopper.user.id, {})  # and after the cart was cleared
    assert checkout(shopper, key="once").status_code == 200
    assert counter() == 4


def test_gate_redis_down_fails_closed_for_gated_skus_only(redis, settings):
    seed(stock=5)
    product_with_stock(sku="PLAIN", available=5)
    settings.CACHES = {
        **settings.CACHES,
        "gate": {**settings.CACHES["gate"], "LOCATION": "redis://127.0.0.1:1/0"},
    }
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    response = checkout(shopper, key="gated")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "gate_unavailable"
    assert not Order.objects.exists()
    fill_cart(redis, shopper.user.id, {"PLAIN": 1})
    assert checkout(shopper, key="plain").status_code == 201


def _warm(clients):
    """Token and flash-sale caches warm, so that threads race in Redis, and only
    admitted checkouts open a database connection (PostgreSQL allows 100)."""
    auth = CachedTokenAuthentication()
    for client in clients:
        auth.authenticate_credentials(client._credentials["HTTP_AUTHORIZATION"].split()[1])
    gated_skus()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_200_concurrent_buyers_for_50_units(redis):
    seed(stock=50)
    clients = [shopper_client(UserFactory()) for _ in range(200)]
    for client in clients:
        fill_cart(redis, client.user.id, {"HOT": 1})
    _warm(clients)
    responses = run_in_threads([lambda c=c: checkout(c) for c in clients])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] * 50 + [409] * 150
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"sold_out"}
    assert counter() == 0
    stock = Stock.objects.get(product_id="HOT")
    assert (stock.available, stock.reserved) == (0, 50)
    assert Order.objects.count() == 50


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_per_customer_limit_under_concurrency(redis, monkeypatch):
    seed(stock=100, limit=1)
    user = UserFactory()
    fill_cart(redis, user.id, {"HOT": 1})
    # Each checkout takes the cart it admits: put it back before each admission, so that all 20 reach the gate
    # with it (Redis runs the admission scripts one at a time anyway; the rest of the checkouts run at once).
    real_admit, lock = checkout_service.admit_cart, threading.Lock()

    def admit_with_a_full_cart(**kwargs):
        with lock:
            fill_cart(redis, user.id, {"HOT": 1})
            return real_admit(**kwargs)

    monkeypatch.setattr(checkout_service, "admit_cart", admit_with_a_full_cart)
    clients = [shopper_client(user) for _ in range(20)]
    _warm(clients)
    responses = run_in_threads([lambda c=c, i=i: checkout(c, key=f"tab-{i}") for i, c in enumerate(clients)])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] + [409] * 19
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"limit_reached"}
    assert Order.objects.count() == 1
    assert counter() == 99
    assert Stock.objects.get(product_id="HOT").reserved == 1
    connection.close()


def test_cancelled_order_gives_its_units_back_to_the_gate(redis, django_capture_on_commit_callbacks):
    seed(stock=5, limit=1)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        order_id = checkout(shopper, key="first").json()["id"]
    assert counter() == 4
    with django_capture_on_commit_callbacks(execute=True):
        assert shopper.post(f"/api/orders/{order_id}/cancel").status_code == 200
    assert counter() == 5 and Stock.objects.get(product_id="HOT").available == 5
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper, key="second").status_code == 201  # the limit counts live orders only


def test_refused_checkout_makes_one_redis_call(redis, monkeypatch, settings):
    """Cart read, rate limit and gate: one script (orders/services/admission.py).
    Once the gate refused a shopper, the next refusals cost none for a moment
    (tests/orders/test_sold_out_memory.py); here every refusal asks the gate."""
    settings.SOLD_OUT_MEMORY_MS = 0
    seed(stock=0)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    checkout(shopper, key="warm")
    sent = redis_commands(redis, monkeypatch)
    assert checkout(shopper, key="refused").status_code == 409
    assert sent == ["EVALSHA"]


def test_gate_on_a_redis_of_its_own_admits_in_a_second_call(redis, settings):
    server, db = settings.CACHES["default"]["LOCATION"].rsplit("/", 1)
    own_redis = f"{server}/{14 if db == '13' else 13}"  # a database the tests' own is not
    settings.CACHES = {**settings.CACHES, "gate": {**settings.CACHES["gate"], "LOCATION": own_redis}}
    assert not gate.shares_cart_redis()
    gate.connection().flushdb()
    try:
        seed(stock=1)
        first, second = shopper_client(), shopper_client()
        for shopper in (first, second):
            fill_cart(redis, shopper.user.id, {"HOT": 1})
        assert checkout(first).status_code == 201
        response = checkout(second)
        assert response.status_code == 409 and response.json()["error"]["code"] == "sold_out"
        assert counter() == 0 and redis.get(gate.remaining_key("HOT")) is None  # on the gate's database only
        assert redis.hgetall(f"cart:{second.user.id}") == {b"HOT": b"1"}  # taken, then given back on the refusal
        assert not redis.exists(f"cart:{first.user.id}")  # taken by the order
    finally:
        gate.connection().flushdb()


def test_a_sale_opened_by_another_process_gates_a_warm_process_at_once(redis):
    from core.hotcache import hot_cache

    product_with_stock(sku="HOT", available=5)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert gate_rules() == {}  # this process's warm view: nothing gated
    warm_view = (hot_cache.generation, hot_cache.flash_sales)
    seed(stock=0)  # elsewhere: the sale opens, sold out at once (the generation moves on)
    hot_cache.generation, hot_cache.flash_sales = warm_view  # this process has not heard yet
    response = checkout(shopper)
    # The admission script sees the old generation: caches dropped, request retried, gate applied.
    assert response.status_code == 409 and response.json()["error"]["code"] == "sold_out"
    assert set(gate_rules_in_memory() or {}) == {"HOT"}  # the retry reloaded this process's list


@pytest.mark.parametrize("end", ["expired", "cancelled"])
def test_units_of_a_sale_seeded_after_a_worker_loaded_its_sales_reach_its_gate(
    redis, end, django_capture_on_commit_callbacks
):
    """The worker (Celery: expiry, staff cancellations) read its list of sales
    before a second sale was seeded elsewhere: the second sale's units still go
    back to its gate when its order ends."""
    from core.hotcache import hot_cache
    from orders.services import cancel_pending_order, expire_unpaid_orders
    from tests.helpers import expire_now, place_pending_order

    seed(sku="OLD", stock=5)
    assert gated_skus() == {"OLD": 0}  # the worker's list of sales
    worker_view = (hot_cache.generation, hot_cache.flash_sales)
    seed(sku="NEW", stock=5)  # elsewhere: a second sale (the generation moves on)
    order = place_pending_order(redis, UserFactory(), {"NEW": 2})
    assert counter("NEW") == 3
    hot_cache.generation, hot_cache.flash_sales = worker_view  # the worker has not heard of it
    with django_capture_on_commit_callbacks(execute=True):
        if end == "expired":
            expire_now(order)
            assert expire_unpaid_orders() == 1
        else:
            assert cancel_pending_order(order_id=order.id)
    assert counter("NEW") == 5 and counter("OLD") == 5
    assert not gate.connection().hget(gate.bought_key("NEW"), order.customer_id)  # the shopper may buy again


def test_without_redis_the_worker_still_expires_orders_of_a_sale(redis, settings, django_capture_on_commit_callbacks):
    """A cold worker reads its list of sales from the database when Redis is out
    of reach: the orders expire and their stock comes back (the gate undersells
    until flash_sale_sync, as for any release that could not reach it)."""
    from orders.models import OrderStatus
    from orders.services import expire_unpaid_orders
    from tests.helpers import expire_now, place_pending_order, stop_redis_for_this_process

    seed(sku="HOT", stock=5, limit=2)
    order = place_pending_order(redis, UserFactory(), {"HOT": 2})
    expire_now(order)
    stop_redis_for_this_process(settings)
    assert gated_skus() == {"HOT": 2}
    with django_capture_on_commit_callbacks(execute=True):
        assert expire_unpaid_orders() == 1
    order.refresh_from_db()
    assert order.status == OrderStatus.CANCELLED and Stock.objects.get(product_id="HOT").available == 5
