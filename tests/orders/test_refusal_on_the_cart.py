"""Early refusals with the gate on a Redis of its own (orders/services/admission.py,
_refused_by_the_cart): the process asks the gate which SKUs are sold out once per
SOLD_OUT_MEMORY_MS and refuses by reading the cart on the cart's Redis, so that
a sold-out sale's refusals cost the gate's Redis nothing. Admission always goes
through the gate."""

import pytest
from redis.connection import Connection

from core.hotcache import hot_cache
from inventory import gate
from orders.services import admission
from tests.helpers import checkout, fill_cart, shopper_client
from tests.inventory.conftest import counter, seed
from tests.orders.test_sold_out_memory import Clock

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch, settings) -> Clock:
    settings.SOLD_OUT_MEMORY_MS = 500
    pinned = Clock()
    monkeypatch.setattr(admission, "monotonic", pinned)
    return pinned


@pytest.fixture
def sent(monkeypatch) -> list[tuple[int, str]]:
    """(database, command) of every command any client sends from now on (call sent.clear() to start)."""
    recorded, real = [], Connection.send_command

    def send(self, *args, **kwargs):
        if args[0] == "SCRIPT LOAD":
            recorded.pop()  # the EVALSHA Redis answered NOSCRIPT: its script cache was empty
        else:
            recorded.append((self.db, args[0]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Connection, "send_command", send)
    return recorded


def shopper_with(redis, lines: dict[str, int]):
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, lines)
    return shopper


def on(db: int, sent: list[tuple[int, str]]) -> list[str]:
    return [command for database, command in sent if database == db]


def test_a_sold_out_sale_costs_the_gate_one_call_per_memory_not_one_per_refusal(redis, gate_apart, clock, views, sent):
    seed(stock=0)
    first = shopper_with(redis, {"HOT": 1})
    ordinary = checkout(first, key="first")  # the ordinary path: cart taken and given back, the gate refuses
    assert ordinary.status_code == 409 and views == [first.user.id]
    losers = [shopper_with(redis, {"HOT": 1}) for _ in range(4)]
    for loser in losers:
        assert loser.get("/api/cart").status_code == 200  # their tokens in this process's memory
    cart_db = int(redis.connection_pool.connection_kwargs["db"])
    sent.clear()

    refused = [checkout(loser, key="early") for loser in losers]

    assert [(r.status_code, r.content) for r in refused] == [(409, ordinary.content)] * 4
    assert views == [first.user.id]  # none reached the view
    assert on(gate_apart, sent) == ["EVALSHA"]  # which SKUs are sold out: asked once for all of them
    assert on(cart_db, sent) == ["GET"] + ["EVALSHA"] * 4  # the generation checked once, each shopper's cart read

    sent.clear()
    clock.advance(100)
    again = [checkout(loser, key="again") for loser in [*losers, first]]

    assert [(r.status_code, r.content) for r in again] == [(409, ordinary.content)] * 5
    assert sent == []  # each shopper refused within SOLD_OUT_MEMORY_MS: from memory
    assert views == [first.user.id]


def test_the_refusals_answered_on_the_cart_are_counted_in_the_gate_by_its_next_call(redis, gate_apart, clock, views):
    seed(stock=0)
    shoppers = [shopper_with(redis, {"HOT": 1}) for _ in range(3)]
    for shopper in shoppers:
        assert shopper.get("/api/cart").status_code == 200  # their tokens in this process's memory
    assert checkout(shoppers[0], key="ordinary").status_code == 409  # counted by the gate itself
    for shopper in shoppers:
        assert checkout(shopper, key="early").status_code == 409  # the gate asked once, then memory or the cart
    assert views == [shoppers[0].user.id]
    assert gate.counters(skus=["HOT"])["HOT"]["refused"] == 1 and admission.refusal_memory.unflushed == {"HOT": 3}

    clock.advance(500)  # the gate's word lapses: the next refusal asks it again, with the counts
    assert checkout(shoppers[1], key="asks").status_code == 409

    assert gate.counters(skus=["HOT"])["HOT"]["by_reason"] == {"sold_out": 4, "limit_reached": 0, "rate_limited": 0}
    assert admission.refusal_memory.unflushed == {"HOT": 1}  # the last one, for the call after


def test_a_retry_of_the_checkout_that_took_the_last_unit_gets_its_order_not_a_refusal(
    redis, gate_apart, clock, views, django_capture_on_commit_callbacks
):
    seed(stock=1)
    winner = shopper_with(redis, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        first = checkout(winner, key="mine")
    assert first.status_code == 201
    assert checkout(shopper_with(redis, {"HOT": 1}), key="flag").status_code == 409  # sold out: early refusals on
    fill_cart(redis, winner.user.id, {"HOT": 1})  # the winner fills the cart again (another tab)

    replayed = checkout(winner, key="mine")  # the answer to "mine" never came: the client retries

    assert replayed.status_code in (200, 201) and replayed.json()["id"] == first.json()["id"]


def test_carts_the_early_refusal_leaves_to_the_gate(
    redis, gate_apart, clock, views, django_capture_on_commit_callbacks
):
    from tests.factories import product_with_stock

    seed(sku="HOT", stock=0)
    seed(sku="AAA-LIMITED", stock=10, limit=1)
    product_with_stock(sku="MUG", available=5)
    assert checkout(shopper_with(redis, {"HOT": 1}), key="flag").status_code == 409  # sold out: early refusals on
    plain = shopper_with(redis, {"MUG": 1})
    first_line_not_sold_out = shopper_with(redis, {"HOT": 1, "AAA-LIMITED": 1})
    views.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(plain, key="mug").status_code == 201
    # the gate judges AAA-LIMITED first (by SKU): its answer, not the early one, decides
    refused = checkout(first_line_not_sold_out, key="both")

    assert views == [plain.user.id, first_line_not_sold_out.user.id]
    assert refused.status_code == 409 and refused.json()["error"]["details"] == {"sku": "HOT"}
    assert counter("AAA-LIMITED") == 10  # all or nothing


def test_the_rate_limit_counts_refusals_on_the_cart_as_it_counts_ordinary_ones(redis, gate_apart, settings, views):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "checkout": "2/min"}
    settings.SOLD_OUT_MEMORY_MS = 0  # every refusal reads the cart
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    answers = [checkout(shopper, key=f"k{i}") for i in range(4)]

    assert [a.status_code for a in answers] == [409, 409, 429, 429]
    assert views == [shopper.user.id]  # the first took the ordinary path; the rest were answered early
    assert int(answers[2]["Retry-After"]) >= 1
    admission.refusal_memory.flush()
    assert gate.counters(skus=["HOT"])["HOT"]["by_reason"] == {"sold_out": 2, "limit_reached": 0, "rate_limited": 2}


def test_a_stale_cache_leaves_the_refusal_to_the_ordinary_path(redis, gate_apart, clock, views):
    seed(stock=0)
    shopper = shopper_with(redis, {"HOT": 1})
    checkout(shopper, key="first")
    clock.advance(500)
    redis.incr("shop:cache-generation")  # another process changed the catalog

    answer = checkout(shopper, key="stale")

    assert answer.status_code == 409 and len(views) > 1 and set(views) == {shopper.user.id}  # the view decided
    assert hot_cache.sold_out == {"HOT"}


def test_an_admission_by_the_gate_apart_counts_as_an_edit_of_the_cart(
    redis, gate_apart, clock, views, django_capture_on_commit_callbacks
):
    seed(stock=1)
    winner = shopper_with(redis, {"HOT": 1})
    with django_capture_on_commit_callbacks(execute=True):
        assert checkout(winner, key="won").status_code == 201

    edits = gate.connection().hget(gate.CART_EDITS_KEY, gate.cart_edit_stripe(winner.user.id))
    assert int(edits) == 1 and redis.hget(gate.CART_EDITS_KEY, gate.cart_edit_stripe(winner.user.id)) is None


def test_a_cart_wanting_more_than_is_left_does_not_refuse_the_others(
    redis, gate_apart, clock, views, django_capture_on_commit_callbacks
):
    seed(stock=1)
    seed(sku="GONE", stock=0)
    other = shopper_with(redis, {"GONE": 1})
    assert other.get("/api/cart").status_code == 200
    assert [checkout(other, key=k).status_code for k in ("a", "b")] == [409, 409]  # the gate's word is fresh
    greedy, modest = shopper_with(redis, {"HOT": 2}), shopper_with(redis, {"HOT": 1})
    assert modest.get("/api/cart").status_code == 200  # its token in memory: it could be refused early
    assert checkout(greedy, key="two").status_code == 409  # sold out for 2: 1 unit is still left

    with django_capture_on_commit_callbacks(execute=True):
        ordered = checkout(modest, key="one")

    assert ordered.status_code == 201 and counter() == 0
