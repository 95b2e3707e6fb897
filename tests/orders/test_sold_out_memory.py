"""Refusals from process memory (orders/services/admission.py, RefusalMemory): once
the gate refused a shopper (sold out, or over a SKU's limit), that shopper's
checkouts are refused again with no Redis call for SOLD_OUT_MEMORY_MS, then the
gate is asked again; admission always goes through the gate."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.hotcache import hot_cache
from core.redis_scripts import script_client
from inventory import gate
from inventory.models import Stock
from inventory.services.flash_sales import end_flash_sale
from orders.models import Order
from orders.services import admission
from tests.factories import UserFactory
from tests.helpers import checkout, fill_cart, redis_commands, run_in_threads, shopper_client
from tests.inventory.conftest import counter, seed

pytestmark = pytest.mark.django_db


class Clock:
    """admission's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms / 1000


@pytest.fixture
def clock(monkeypatch, settings) -> Clock:
    settings.SOLD_OUT_MEMORY_MS = 500
    pinned = Clock()
    monkeypatch.setattr(admission, "monotonic", pinned)
    return pinned


def shopper_with(redis, lines: dict[str, int]):
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, lines)
    return shopper


def test_sold_out_memory_refuses_without_redis_then_asks_the_gate_again(redis, clock, views, monkeypatch):
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    ordinary = checkout(shopper, key="first")  # the ordinary path: the gate says sold out
    assert ordinary.status_code == 409 and views == [shopper.user.id]
    script_client("gate").connection.connect()  # open, as in any warm process
    hot_cache.check_generation()

    sent = redis_commands(redis, monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        remembered = [checkout(shopper, key=f"again-{i}") for i in range(3)]
        clock.advance(499)
        remembered.append(checkout(shopper, key="just-before"))

    assert sent == ["GET", "EVALSHA"]  # the generation, the gate's word: once for SOLD_OUT_MEMORY_MS
    assert len(queries) == 0 and views == [shopper.user.id]
    for response in remembered:
        assert (response.status_code, response.content) == (409, ordinary.content)
        assert all(response[k] == ordinary[k] for k in ("Content-Type", "Allow", "Content-Length", "X-Frame-Options"))

    clock.advance(1)  # SOLD_OUT_MEMORY_MS after the gate's answer
    asked = checkout(shopper, key="asked")

    assert (asked.status_code, asked.content) == (409, ordinary.content)
    assert sent == ["GET", "EVALSHA"] * 2 + ["EVALSHA"] and views == [shopper.user.id]  # the word again, the early call
    assert gate.counters(skus=["HOT"])["HOT"]["refused"] == 6  # those from memory added by the gate's word


def test_sold_out_memory_counts_its_refusals_in_the_gate_once_it_lapses(redis, clock, views):
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    checkout(shopper, key="first")
    for i in range(4):
        assert checkout(shopper, key=f"remembered-{i}").status_code == 409
    assert gate.counters(skus=["HOT"])["HOT"]["refused"] == 1  # 4 held in this process

    clock.advance(500)
    checkout(shopper, key="flushes")  # asks the gate, which counts it: 1 + 4 + 1

    assert gate.counters(skus=["HOT"])["HOT"]["by_reason"] == {"sold_out": 6, "limit_reached": 0, "rate_limited": 0}
    assert admission.refusal_memory.unflushed == {}


@pytest.mark.parametrize("gate_redis", ["shared", "apart"])
def test_sold_out_memory_units_given_back_are_admitted_once_it_lapses_never_before(
    redis, clock, views, django_capture_on_commit_callbacks, request, gate_redis
):
    if gate_redis == "apart":
        request.getfixturevalue("gate_apart")  # refused on the cart's Redis, the gate asked every half second
    seed(stock=1)
    winner, loser = shopper_with(redis, {"HOT": 1}), shopper_with(redis, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        order_id = checkout(winner, key="won").json()["id"]
    assert checkout(loser, key="lost").status_code == 409  # remembered
    clock.advance(500)
    assert checkout(loser, key="still-sold-out").status_code == 409  # the gate, asked again, refuses: remembered

    with django_capture_on_commit_callbacks(execute=True):
        assert winner.post(f"/api/orders/{order_id}/cancel").status_code == 200  # its unit back in the gate
    assert counter() == 1
    refused_from_memory = checkout(loser, key="too-early")
    clock.advance(499)
    refused_at_the_edge = checkout(loser, key="at-the-edge")

    assert (refused_from_memory.status_code, refused_at_the_edge.status_code) == (409, 409)
    assert counter() == 1 and not Order.objects.filter(customer_id=loser.user.id).exists()

    clock.advance(1)
    with django_capture_on_commit_callbacks(execute=True):
        admitted = checkout(loser, key="after")

    assert admitted.status_code == 201 and counter() == 0
    assert Order.objects.filter(customer_id=loser.user.id).count() == 1


def test_sold_out_memory_limit_is_remembered_for_that_shopper_only(
    redis, clock, views, monkeypatch, django_capture_on_commit_callbacks
):
    seed(sku="HOT", stock=0)
    seed(sku="LIMITED", stock=10, limit=1)
    checkout(shopper_with(redis, {"HOT": 1}), key="flag")  # a sale sold out: early refusals are on
    buyer, other = shopper_with(redis, {"LIMITED": 1}), shopper_with(redis, {"LIMITED": 1})
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(buyer, key="once").status_code == 201
    fill_cart(redis, buyer.user.id, {"LIMITED": 1})
    assert checkout(buyer, key="twice").status_code == 409  # the gate: over the limit, remembered
    checkout(other, key="warm-token")  # 201; the token is in memory now, the cart taken
    fill_cart(redis, other.user.id, {"LIMITED": 1})

    sent = redis_commands(redis, monkeypatch)
    remembered = checkout(buyer, key="thrice")
    assert sent == []
    assert remembered.status_code == 409
    assert remembered.json()["error"] == {
        "code": "limit_reached",
        "message": "You have reached the per-customer limit for this flash-sale item.",
        "details": {"sku": "LIMITED", "limit": 1},
    }
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(other, key="first-of-other").status_code == 409  # other's own limit: the gate says so
    assert sent  # asked: nothing remembered for this shopper before

    clock.advance(500)
    checkout(buyer, key="asked")
    counted = gate.counters(skus=["LIMITED"])["LIMITED"]
    assert (counted["refused"], counted["by_reason"]["limit_reached"]) == (4, 4)


def test_sold_out_memory_not_used_for_a_sale_reseeded_or_ended(redis, clock, views, django_capture_on_commit_callbacks):
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    assert checkout(shopper, key="refused").status_code == 409  # remembered

    seed(stock=2)  # the generation moves: this process's memory goes with its caches
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(shopper, key="reseeded").status_code == 201
    assert hot_cache.refusals == {}

    other = shopper_with(redis, {"HOT": 2})
    assert checkout(other, key="sold-out").status_code == 409  # 1 left for 2: remembered
    with django_capture_on_commit_callbacks(execute=True):
        end_flash_sale(sku="HOT")
    fill_cart(redis, other.user.id, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(other, key="ungated").status_code == 201  # straight to the database


def test_sold_out_memory_off_when_the_setting_is_zero(redis, clock, views, settings, monkeypatch):
    settings.SOLD_OUT_MEMORY_MS = 0
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    checkout(shopper, key="first")
    sent = redis_commands(redis, monkeypatch)

    assert checkout(shopper, key="second").status_code == 409
    assert "EVALSHA" in sent and hot_cache.refusals == {}


@pytest.mark.django_db(transaction=True)
def test_sold_out_memory_never_oversells_under_concurrent_threads(redis, clock):
    seed(stock=10)
    shoppers = [shopper_with(redis, {"HOT": 1}) for _ in range(40)]
    for shopper in shoppers:
        assert checkout(shopper, key="warm-token").status_code in (201, 409)  # tokens and caches warm
    winners = [s for s in shoppers if Order.objects.filter(customer_id=s.user.id).exists()]
    losers = [s for s in shoppers if s not in winners]
    assert len(winners) == 10 and counter() == 0

    for order in Order.objects.filter(customer_id__in=[s.user.id for s in winners[:4]]):
        owner = next(s for s in winners if s.user.id == order.customer_id)
        assert owner.post(f"/api/orders/{order.id}/cancel").status_code == 200  # 4 units back
    assert counter() == 4

    remembered = run_in_threads([lambda s=s, i=i: checkout(s, key=f"remembered-{i}") for i, s in enumerate(losers)])
    assert sorted(r.status_code for r in remembered) == [409] * 30 and counter() == 4

    clock.advance(500)
    asked = run_in_threads([lambda s=s, i=i: checkout(s, key=f"asked-{i}") for i, s in enumerate(losers)])

    assert sorted(r.status_code for r in asked) == [201] * 4 + [409] * 26
    assert {r.json()["error"]["code"] for r in asked if r.status_code == 409} == {"sold_out"}
    assert counter() == 0
    stock = Stock.objects.get(product_id="HOT")
    assert (stock.available, stock.reserved) == (0, 10)
    assert Order.objects.exclude(status="CANCELLED").filter(items__product_id="HOT").count() == 10
    connection.close()


def test_sold_out_memory_is_bounded(redis, clock, monkeypatch):
    monkeypatch.setattr(admission.RefusalMemory, "MAX_ENTRIES", 3)
    memory = admission.refusal_memory
    for customer_id in range(5):
        memory.remember(customer_id, "sold_out", "HOT", "7")

    assert len(hot_cache.refusals) <= 3 and 4 in hot_cache.refusals


def test_sold_out_memory_ignores_an_old_generation(redis, clock):
    memory = admission.refusal_memory
    memory.remember(UserFactory().id, "sold_out", "HOT", "7")
    [(customer_id, _)] = hot_cache.refusals.items()

    assert memory.recall(customer_id, "8", {"HOT": object()}) is None and hot_cache.refusals == {}


def refused_early(redis, clock, shopper) -> None:
    """The shopper refused once by the gate, then early with the gate's word fresh: remembered with its cart edits."""
    assert checkout(shopper, key="ordinary").status_code == 409
    clock.advance(500)
    assert checkout(shopper, key="early").status_code == 409
    _, _, _, _, edits = hot_cache.refusals[shopper.user.id]
    assert edits is not None  # remembered for as long as the gate's word confirms it


def test_a_sold_out_refusal_is_remembered_while_the_gate_says_so_one_call_per_half_second(
    redis, clock, views, monkeypatch
):
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    refused_early(redis, clock, shopper)
    script_client("gate").connection.connect()
    hot_cache.check_generation()
    sent = redis_commands(redis, monkeypatch)

    answers = []
    for step in range(40):  # 10 s of retries, 4 a second
        clock.advance(250)
        answers.append(checkout(shopper, key=f"retry-{step}"))

    assert {a.status_code for a in answers} == {409}
    assert sent == ["GET", "EVALSHA"] * 20  # the generation and the gate's word every SOLD_OUT_MEMORY_MS
    assert views == [shopper.user.id]


def test_a_cart_edited_in_another_process_is_seen_by_the_gates_next_word(
    redis, clock, views, django_capture_on_commit_callbacks
):
    from tests.factories import product_with_stock

    seed(stock=0)
    product_with_stock(sku="MUG", available=5)
    shopper = shopper_with(redis, {"HOT": 1})
    refused_early(redis, clock, shopper)
    fill_cart(redis, shopper.user.id, {"MUG": 1})  # another process: the sold-out line removed, and counted
    gate.connection().hincrby(gate.CART_EDITS_KEY, gate.cart_edit_stripe(shopper.user.id), 1)

    clock.advance(499)
    assert checkout(shopper, key="too-early").status_code == 409  # the stated cost: until the gate's next word
    clock.advance(1)
    with django_capture_on_commit_callbacks(execute=True):
        ordered = checkout(shopper, key="after")

    assert ordered.status_code == 201 and views[-1] == shopper.user.id
    assert shopper.user.id not in hot_cache.refusals


def test_a_cart_edited_through_this_process_is_seen_at_once(redis, clock, views, django_capture_on_commit_callbacks):
    from tests.factories import product_with_stock

    seed(stock=0)
    product_with_stock(sku="MUG", available=5)
    shopper = shopper_with(redis, {"HOT": 1, "MUG": 1})
    refused_early(redis, clock, shopper)
    stripe = gate.cart_edit_stripe(shopper.user.id)
    before = int(gate.connection().hget(gate.CART_EDITS_KEY, stripe) or 0)

    assert shopper.delete("/api/cart/items/HOT").status_code == 204
    with django_capture_on_commit_callbacks(execute=True):
        ordered = checkout(shopper, key="right-after")

    assert ordered.status_code == 201
    assert int(gate.connection().hget(gate.CART_EDITS_KEY, stripe)) == before + 2  # before the write, and after it
    assert shopper.put("/api/cart/items/MUG", {"quantity": 2}, format="json").status_code == 200
    assert int(gate.connection().hget(gate.CART_EDITS_KEY, stripe)) == before + 2  # not a flash-sale line


def test_an_admission_counts_as_an_edit_of_the_cart(redis, clock, views, django_capture_on_commit_callbacks):
    seed(stock=1)
    winner = shopper_with(redis, {"HOT": 1})
    stripe = gate.cart_edit_stripe(winner.user.id)
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(winner, key="won").status_code == 201

    assert int(gate.connection().hget(gate.CART_EDITS_KEY, stripe)) == 1  # a memory of refusing it lapses


def test_a_guest_cart_merged_at_registration_counts_as_an_edit(redis, clock):
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from tests.factories import PASSWORD, product_with_stock

    seed(stock=0)
    product_with_stock(sku="MUG", available=5)
    token = APIClient().put("/api/cart/items/MUG", {"quantity": 1}, format="json")["Cart-Token"]
    registered = APIClient().post(
        "/api/auth/register", {"username": "merger", "password": PASSWORD}, format="json", HTTP_CART_TOKEN=token
    )
    assert registered.status_code == 201 and registered.json()["cart_merged"] == 1

    shopper = get_user_model().objects.get(username="merger")
    assert int(gate.connection().hget(gate.CART_EDITS_KEY, gate.cart_edit_stripe(shopper.id))) == 1


def test_a_flash_sale_line_is_not_written_while_the_gate_cannot_count_the_edit(redis, settings):
    from tests.factories import product_with_stock

    seed(stock=5)
    product_with_stock(sku="MUG", available=5)
    shopper = shopper_with(redis, {"HOT": 1})
    settings.CACHES = {**settings.CACHES, "gate": {**settings.CACHES["gate"], "LOCATION": "redis://127.0.0.1:1/0"}}

    refused = shopper.put("/api/cart/items/HOT", {"quantity": 2}, format="json")
    removed = shopper.delete("/api/cart/items/HOT")
    plain = shopper.put("/api/cart/items/MUG", {"quantity": 1}, format="json")

    assert (refused.status_code, removed.status_code) == (503, 503)
    assert refused.json()["error"]["code"] == "gate_unavailable"
    assert plain.status_code == 200  # a line no sale gates: the gate is not asked
    assert redis.hgetall(f"cart:{shopper.user.id}") == {b"HOT": b"1", b"MUG": b"1"}


def test_a_retry_of_a_bought_checkout_is_not_answered_from_a_later_refusal(
    redis, clock, views, django_capture_on_commit_callbacks
):
    seed(stock=1)
    winner = shopper_with(redis, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        bought = checkout(winner, key="mine")
    assert bought.status_code == 201
    fill_cart(redis, winner.user.id, {"HOT": 1})  # the same item again, in another tab
    refused_early(redis, clock, winner)  # refused under new keys, and remembered

    replayed = checkout(winner, key="mine")  # the first answer never came: the client retries

    assert replayed.status_code == 200 and replayed.json()["id"] == bought.json()["id"]


def test_a_token_revoked_by_another_process_ends_a_long_memory_at_the_gates_next_word(redis, clock, views):
    from knox.models import AuthToken

    from core.authentication import forget_tokens

    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    refused_early(redis, clock, shopper)
    digests = list(AuthToken.objects.filter(user=shopper.user).values_list("digest", flat=True))
    with connection.cursor() as cursor:  # another process revokes it: no signal here
        cursor.execute("DELETE FROM knox_authtoken WHERE user_id = %s", [shopper.user.id])
    forget_tokens(digests)
    redis.incr("shop:cache-generation")

    clock.advance(500)
    assert checkout(shopper, key="revoked").status_code == 401


def test_a_long_memory_ends_with_its_sales_window(redis, clock):
    from inventory.services.flash_sales import GateRule

    memory, now_ms = admission.refusal_memory, int(time.time() * 1000)
    hot_cache.sold_out, hot_cache.cart_edits, hot_cache.sold_out_heard = frozenset({"HOT"}), {}, clock.now
    memory.remember(7, "sold_out", "HOT", "1", edits=0)
    open_rule, closed_rule = GateRule(0, "direct", now_ms - 60_000, 0), GateRule(0, "direct", 0, now_ms - 1)

    assert memory.recall(7, "1", {"HOT": open_rule}) == ("sold_out", "HOT")
    assert memory.recall(7, "1", {"HOT": closed_rule}) is None  # the gate says sale_ended now
