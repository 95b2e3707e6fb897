"""orders/early_refusal.py: while a flash sale is sold out, its refusals are answered
before authentication and DRF, and are the very answers the ordinary path gives."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from knox.models import AuthToken

from core.hotcache import GENERATION_KEY, hot_cache
from inventory import gate
from inventory.services.flash_sales import set_flash_sale_mode
from orders.models import Order
from orders.services import admission
from tests.factories import product_with_stock
from tests.helpers import checkout, fill_cart, redis_commands, shopper_client
from tests.inventory.conftest import counter, seed

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_refusal_memory(settings):
    """These tests are about the gate's early call; refusals from process memory,
    which skip it for a moment, are tests/orders/test_sold_out_memory.py's."""
    settings.SOLD_OUT_MEMORY_MS = 0


def sold_out_shopper(redis, sku: str = "HOT"):
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {sku: 1})
    return shopper


def test_the_early_refusal_is_the_ordinary_one_without_sql_or_the_view(redis, views, monkeypatch):
    seed(stock=0)
    shopper = sold_out_shopper(redis)
    ordinary = checkout(shopper, key="first")  # the ordinary path: it hears the gate say sold out
    assert views == [shopper.user.id] and hot_cache.sold_out == {"HOT"}

    redis.script_load(admission._REFUSAL)  # in Redis's script cache, as after any process's first refusal
    sent = redis_commands(redis, monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        early = checkout(shopper, key="second")

    assert views == [shopper.user.id]  # the second never reached the view
    assert len(queries) == 0 and sent == ["EVALSHA"]
    assert (early.status_code, early.content) == (ordinary.status_code, ordinary.content) == (409, early.content)
    assert early.json()["error"] == {
        "code": "sold_out",
        "message": "This flash-sale item is sold out.",
        "details": {"sku": "HOT"},
    }
    different = {"X-Request-ID"}  # per request
    assert {k for k in early.headers if k not in different} == {k for k in ordinary.headers if k not in different}
    assert all(early[k] == ordinary[k] for k in ("Content-Type", "Allow", "Content-Length", "X-Frame-Options"))
    assert gate.counters(skus=["HOT"])["HOT"]["refused"] == 2  # counted as the gate counts its own


def test_a_cart_without_the_sold_out_sku_checks_out_while_the_flag_is_up(redis, views):
    seed(stock=0)
    product_with_stock(sku="PLAIN", available=5)
    checkout(sold_out_shopper(redis), key="flag")
    other = shopper_client()
    fill_cart(redis, other.user.id, {"PLAIN": 1})
    checkout(other, key="warm-token")  # 201; now its token is in memory
    fill_cart(redis, other.user.id, {"PLAIN": 1})

    response = checkout(other, key="plain")

    assert response.status_code == 201 and views[-1] == other.user.id
    assert Order.objects.filter(customer_id=other.user.id).count() == 2


def test_units_given_back_end_the_early_refusals(redis, views, django_capture_on_commit_callbacks):
    seed(stock=1)
    winner, loser = sold_out_shopper(redis), sold_out_shopper(redis)
    with django_capture_on_commit_callbacks(execute=True):
        order_id = checkout(winner, key="won").json()["id"]
    assert checkout(loser, key="flag").status_code == 409
    assert checkout(loser, key="early").status_code == 409 and views.count(loser.user.id) == 1

    with django_capture_on_commit_callbacks(execute=True):
        assert winner.post(f"/api/orders/{order_id}/cancel").status_code == 200  # its unit goes back
    with django_capture_on_commit_callbacks(execute=True):
        response = checkout(loser, key="after")

    assert response.status_code == 201 and views.count(loser.user.id) == 2
    assert counter() == 0


def test_the_flag_clears_when_the_gate_says_units_are_back(redis, views):
    seed(stock=0)
    product_with_stock(sku="PLAIN", available=5)
    checkout(sold_out_shopper(redis), key="flag")
    other = shopper_client()
    fill_cart(redis, other.user.id, {"PLAIN": 1})
    checkout(other, key="warm")
    fill_cart(redis, other.user.id, {"PLAIN": 1})
    gate.set_counter(sku="HOT", remaining=3, reset_customers=False)

    assert checkout(other, key="plain").status_code == 201

    assert hot_cache.sold_out == frozenset()  # nobody pays for the early call any more


def test_the_rate_limit_counts_early_refusals_as_it_counts_ordinary_ones(redis, settings, views):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "checkout": "3/min"}
    seed(stock=0)
    shopper = sold_out_shopper(redis)
    answers = [checkout(shopper, key=f"k{i}") for i in range(5)]

    assert [a.status_code for a in answers] == [409, 409, 409, 429, 429]
    assert len(views) == 1
    assert answers[3].json()["error"]["code"] == "rate_limited" and int(answers[3]["Retry-After"]) >= 1
    assert gate.counters(skus=["HOT"])["HOT"]["by_reason"]["rate_limited"] == 2


def test_the_per_customer_limit_is_refused_early_too(redis, views, django_capture_on_commit_callbacks):
    seed(sku="HOT", stock=0)
    seed(sku="LIMITED", stock=10, limit=1)
    checkout(sold_out_shopper(redis), key="flag")  # a sale sold out: early refusals are on
    buyer = sold_out_shopper(redis, "LIMITED")
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(buyer, key="once").status_code == 201
    fill_cart(redis, buyer.user.id, {"LIMITED": 1})
    reached = len(views)

    response = checkout(buyer, key="twice")

    assert response.status_code == 409 and response.json()["error"]["code"] == "limit_reached"
    assert response.json()["error"]["details"] == {"sku": "LIMITED", "limit": 1}
    assert len(views) == reached


def test_a_replay_a_body_or_an_unknown_token_take_the_ordinary_path(redis, views, django_capture_on_commit_callbacks):
    seed(stock=1)
    winner = sold_out_shopper(redis)
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(winner, key="won").status_code == 201
    loser = sold_out_shopper(redis)
    assert checkout(loser, key="lost").status_code == 409  # sold out, heard

    fill_cart(redis, winner.user.id, {"HOT": 1})
    replay = checkout(winner, key="won")
    with_body = loser.post("/api/orders", {"shipping_address": {"line1": ""}}, format="json", HTTP_IDEMPOTENCY_KEY="b")
    AuthToken.objects.filter(user=loser.user).delete()  # signed out everywhere: the generation moves
    revoked = checkout(loser, key="after-revocation")

    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert with_body.status_code == 400
    assert revoked.status_code == 401
    assert views.count(winner.user.id) == 2 and views.count(loser.user.id) == 1  # the 400 and 401: before the view


@pytest.mark.kafka
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("queue_topic")
def test_queue_mode_refuses_early_as_well(redis, views):
    seed(stock=0)
    set_flash_sale_mode(sku="HOT", mode="queue")
    shopper = sold_out_shopper(redis)
    assert checkout(shopper, key="flag").status_code == 409

    response = checkout(shopper, key="early")

    assert response.status_code == 409 and response.json()["error"]["code"] == "sold_out"
    assert views == [shopper.user.id]


def test_a_token_past_its_minute_in_memory_is_refused_early_without_a_lookup(redis, views, monkeypatch):
    seed(stock=0)
    shopper = sold_out_shopper(redis)
    assert checkout(shopper, key="first").status_code == 409  # the ordinary path: the token is remembered
    hot_cache.tokens = {digest: (found, 0.0, expiry) for digest, (found, _, expiry) in hot_cache.tokens.items()}
    redis.script_load(admission._REFUSAL)

    sent = redis_commands(redis, monkeypatch)
    response = checkout(shopper, key="second")

    assert response.status_code == 409 and response.json()["error"]["code"] == "sold_out"
    assert views == [shopper.user.id]
    assert sent == ["EVALSHA"]  # no token lookup: the refusal's own call checks the cache generation


def test_a_token_revoked_elsewhere_is_not_refused_early_from_an_old_memory(redis, views):
    seed(stock=0)
    shopper = sold_out_shopper(redis)
    assert checkout(shopper, key="first").status_code == 409
    hot_cache.tokens = {digest: (found, 0.0, expiry) for digest, (found, _, expiry) in hot_cache.tokens.items()}
    AuthToken.objects.filter(user=shopper.user)._raw_delete(AuthToken.objects.db)  # logged out on another node,
    redis.delete(*redis.keys("auth:token:*"))
    redis.incr(GENERATION_KEY)  # which moved the generation: this process has not heard yet

    response = checkout(shopper, key="second")

    assert response.status_code == 401


def test_a_token_this_process_no_longer_holds_is_read_from_redis_and_refused_early(redis, views, monkeypatch):
    seed(stock=0)
    shopper = sold_out_shopper(redis)
    assert checkout(shopper, key="first").status_code == 409  # the ordinary path: the token is remembered
    hot_cache.tokens.clear()
    redis.script_load(admission._REFUSAL)

    sent = redis_commands(redis, monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        response = checkout(shopper, key="second")

    assert response.status_code == 409 and response.json()["error"]["code"] == "sold_out"
    assert views == [shopper.user.id] and len(queries) == 0  # the second never reached the view
    assert sent == ["GET", "EVALSHA"]  # the token from Redis, then the refusal
    [(_, deadline, _)] = hot_cache.tokens.values()
    assert deadline > 0  # remembered again
