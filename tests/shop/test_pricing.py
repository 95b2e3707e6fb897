"""shop/pricing.py: the rules of its docstring (and of docs/architecture.md,
"Discounts"), each with a case; then shop/selectors.py's cached_promotions,
which reads the promotions through the hot cache."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.hotcache import CachedProduct, hot_cache
from shop.models import DiscountKind, Promotion
from shop.pricing import PromotionRule, price_lines
from shop.promotions import end_promotions
from shop.selectors import active_promotions, cached_promotions
from tests.factories import ProductFactory, PromotionFactory

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
PERCENT, AMOUNT, CART_AMOUNT = DiscountKind.PERCENT, DiscountKind.AMOUNT, DiscountKind.CART_AMOUNT


def catalog(**prices: int) -> dict[str, CachedProduct]:
    return {
        sku: CachedProduct(sku=sku, name=sku, price=price, is_active=True, weight_grams=0, tax_class="standard")
        for sku, price in prices.items()
    }


def rule(id, kind, value, skus=None, **fields) -> PromotionRule:  # noqa: A002 - the promotion's id
    return PromotionRule(id=id, name=f"promotion {id}", kind=kind, value=value, skus=skus and frozenset(skus), **fields)


def assert_adds_up(cart) -> None:
    assert all(line.total >= 0 for line in cart.lines)
    assert sum(line.total for line in cart.lines) == cart.total == cart.subtotal - sum(a.amount for a in cart.applied)
    for applied in cart.applied:
        taken = sum(amount for line in cart.lines for pid, amount in line.discounts if pid == applied.promotion_id)
        assert taken == applied.amount > 0


# --- the catalog, per unit ---------------------------------------------------------------------


def test_price_lines_without_promotions_is_the_catalog():
    cart = price_lines({"B": 2, "A": 1}, products=catalog(A=1000, B=250), now=NOW)
    assert [(line.sku, line.quantity, line.unit_price, line.discount, line.total) for line in cart.lines] == [
        ("A", 1, 1000, 0, 1000),
        ("B", 2, 250, 0, 500),
    ]
    assert (cart.subtotal, cart.applied, cart.total, cart.voucher) == (1500, (), 1500, None)


def test_price_lines_rounds_a_percentage_half_up_per_unit():
    # 15% of 999 is 149.85: 150 off each unit, never 449.55 -> 450 rounded once for the line by luck.
    cart = price_lines({"A": 3}, products=catalog(A=999), promotions=[rule(1, PERCENT, 15)], now=NOW)
    assert (cart.lines[0].discount, cart.lines[0].total) == (450, 2547)
    # 10% of 5 is 0.5: rounded up to 1 per unit; 10% of 4 is 0.4: nothing, and the promotion is not listed.
    cart = price_lines({"A": 7, "B": 2}, products=catalog(A=5, B=4), promotions=[rule(1, PERCENT, 10)], now=NOW)
    assert [line.discount for line in cart.lines] == [7, 0]
    assert [(a.promotion_id, a.amount) for a in cart.applied] == [(1, 7)]
    assert_adds_up(cart)


def test_price_lines_takes_an_amount_per_unit_never_below_zero():
    cart = price_lines({"A": 2, "B": 3}, products=catalog(A=500, B=900), promotions=[rule(1, AMOUNT, 700)], now=NOW)
    assert [(line.discount, line.total) for line in cart.lines] == [(1000, 0), (2100, 600)]
    assert_adds_up(cart)


def test_price_lines_gives_each_line_its_best_automatic_promotion_and_never_two():
    promotions = [rule(1, PERCENT, 10), rule(2, AMOUNT, 150), rule(3, PERCENT, 50, skus=["C"])]
    products = catalog(A=2000, B=1000, C=1000)
    cart = price_lines({"A": 1, "B": 2, "C": 1}, products=products, promotions=promotions, now=NOW)
    # A: 10% = 200 beats 150; B: 150 a unit beats 100; C: its own 50% beats both. One promotion a line.
    assert [line.discounts for line in cart.lines] == [((1, 200),), ((2, 300),), ((3, 500),)]
    assert [(a.promotion_id, a.amount) for a in cart.applied] == [(1, 200), (2, 300), (3, 500)]
    assert_adds_up(cart)


def test_price_lines_breaks_a_tie_by_the_lowest_promotion_id():
    promotions = [rule(7, AMOUNT, 100), rule(3, PERCENT, 10)]  # both 100 off a unit of 1000
    cart = price_lines({"A": 1}, products=catalog(A=1000), promotions=promotions, now=NOW)
    assert cart.lines[0].discounts == ((3, 100),)


def test_price_lines_applies_a_sku_promotion_to_its_skus_only():
    cart = price_lines(
        {"A": 1, "B": 1}, products=catalog(A=1000, B=1000), promotions=[rule(1, PERCENT, 20, ["B"])], now=NOW
    )
    assert [line.discount for line in cart.lines] == [0, 200]


# --- which promotions take part: window, minimum, codes ----------------------------------------


def test_price_lines_applies_a_promotion_inside_its_window_only():
    hour = timedelta(hours=1)
    promotions = [
        rule(1, PERCENT, 10, starts_at=NOW + hour),  # not started
        rule(2, PERCENT, 20, starts_at=NOW - hour, ends_at=NOW),  # ended at this very moment (the end is excluded)
        rule(3, PERCENT, 5, starts_at=NOW, ends_at=NOW + hour),  # started at this very moment (the start is included)
    ]
    cart = price_lines({"A": 1}, products=catalog(A=1000), promotions=promotions, now=NOW)
    assert cart.lines[0].discounts == ((3, 50),)
    later = price_lines({"A": 1}, products=catalog(A=1000), promotions=promotions, now=NOW + hour)
    assert later.lines[0].discounts == ((1, 100),)


def test_price_lines_compares_the_minimum_with_the_subtotal_at_catalog_prices():
    promotions = [rule(1, PERCENT, 50, ["A"]), rule(2, CART_AMOUNT, 100, min_subtotal=2000)]
    below = price_lines({"A": 1, "B": 1}, products=catalog(A=1000, B=999), promotions=promotions, now=NOW)
    assert [a.promotion_id for a in below.applied] == [1]
    # Exactly the minimum: it applies, though the 50% has brought what is left (1500) below it.
    cart = price_lines({"A": 1, "B": 1}, products=catalog(A=1000, B=1000), promotions=promotions, now=NOW)
    assert [(a.promotion_id, a.amount) for a in cart.applied] == [(1, 500), (2, 100)]
    assert cart.total == 1400
    assert_adds_up(cart)


def test_price_lines_never_applies_a_voucher_listed_among_the_automatic_promotions():
    cart = price_lines({"A": 1}, products=catalog(A=1000), promotions=[rule(1, PERCENT, 10, code="SAVE")], now=NOW)
    assert cart.applied == ()


# --- the cart: amounts spread over the lines ---------------------------------------------------


def test_price_lines_spreads_a_cart_amount_by_largest_remainder_in_sku_order():
    cart = price_lines(
        {"C": 1, "A": 1, "B": 1},
        products=catalog(A=1000, B=1000, C=1000),
        promotions=[rule(1, CART_AMOUNT, 100)],
        now=NOW,
    )
    # 33.33 each: 33 each, and the one unit left over goes to the first in SKU order.
    assert [(line.sku, line.discount) for line in cart.lines] == [("A", 34), ("B", 33), ("C", 33)]
    assert_adds_up(cart)


def test_price_lines_spreads_a_cart_amount_in_proportion_to_what_each_line_costs():
    cart = price_lines(
        {"A": 3, "B": 1, "C": 2}, products=catalog(A=333, B=1, C=50), promotions=[rule(1, CART_AMOUNT, 500)], now=NOW
    )
    # 500 of 1100: A (999) 454.09, B (1) 0.45, C (100) 45.45. The floors make 499; the unit left over goes
    # to the largest remainder: B's and C's are equal (500/1100 each), so SKU order, B.
    assert [line.discount for line in cart.lines] == [454, 1, 45]
    assert cart.total == 600
    assert_adds_up(cart)


def test_price_lines_caps_a_cart_amount_at_what_is_left():
    promotions = [rule(1, PERCENT, 10), rule(2, CART_AMOUNT, 10_000)]
    cart = price_lines({"A": 2, "B": 1}, products=catalog(A=1000, B=1000), promotions=promotions, now=NOW)
    assert [(a.promotion_id, a.amount) for a in cart.applied] == [(1, 300), (2, 2700)]
    assert [line.total for line in cart.lines] == [0, 0] and cart.total == 0
    assert_adds_up(cart)


def test_price_lines_takes_at_most_one_automatic_cart_amount_the_largest():
    promotions = [rule(5, CART_AMOUNT, 300), rule(6, CART_AMOUNT, 500), rule(7, CART_AMOUNT, 400)]
    cart = price_lines({"A": 1}, products=catalog(A=1000), promotions=promotions, now=NOW)
    assert [(a.promotion_id, a.amount) for a in cart.applied] == [(6, 500)]
    # Both larger than the cart: each would take all of it, a tie, so the lowest id.
    capped = price_lines({"A": 1}, products=catalog(A=100), promotions=promotions, now=NOW)
    assert [(a.promotion_id, a.amount) for a in capped.applied] == [(5, 100)]


# --- one voucher, on top ------------------------------------------------------------------------


def test_price_lines_applies_a_percent_voucher_to_what_each_unit_still_costs():
    voucher = rule(9, PERCENT, 10, code="TEN")
    cart = price_lines(
        {"A": 2, "B": 1},
        products=catalog(A=1000, B=999),
        promotions=[rule(1, PERCENT, 20, ["A"])],
        voucher=voucher,
        now=NOW,
    )
    # A: 20% -> 800 a unit, then 10% of 800 = 80; B: 10% of 999 = 99.9 -> 100.
    assert [line.discounts for line in cart.lines] == [((1, 400), (9, 160)), ((9, 100),)]
    assert [(a.promotion_id, a.code, a.amount) for a in cart.applied] == [(1, None, 400), (9, "TEN", 260)]
    assert cart.voucher.amount == 260 and cart.total == 2 * 1000 + 999 - 660
    assert_adds_up(cart)


def test_price_lines_applies_a_cart_amount_voucher_after_the_automatic_one():
    promotions = [rule(1, CART_AMOUNT, 300)]
    voucher = rule(9, CART_AMOUNT, 1000, code="OFF")
    cart = price_lines(
        {"A": 1, "B": 1}, products=catalog(A=600, B=600), promotions=promotions, voucher=voucher, now=NOW
    )
    assert [(a.promotion_id, a.amount) for a in cart.applied] == [(1, 300), (9, 900)]  # the voucher capped at 900
    assert cart.total == 0
    assert_adds_up(cart)


def test_price_lines_ignores_a_voucher_that_does_not_apply():
    products = catalog(A=1000)
    for voucher in (
        rule(9, PERCENT, 10, ["B"], code="B-ONLY"),  # none of its SKUs in the cart
        rule(9, PERCENT, 10, code="BIG", min_subtotal=1001),  # the subtotal below its minimum
        rule(9, PERCENT, 10, code="LATER", starts_at=NOW + timedelta(seconds=1)),
        rule(9, PERCENT, 10, code="OVER", starts_at=NOW - timedelta(days=1), ends_at=NOW),
    ):
        cart = price_lines({"A": 1}, products=products, voucher=voucher, now=NOW)
        assert (cart.applied, cart.voucher, cart.total) == ((), None, 1000), voucher.code


def random_rule(rng: random.Random, id: int, skus: list[str], code: str | None = None) -> PromotionRule:  # noqa: A002
    kind = rng.choice([PERCENT, AMOUNT, CART_AMOUNT])
    value = rng.randint(1, 100) if kind == PERCENT else rng.choice([1, 7, 50, 999, 10**6])
    listed = None if kind == CART_AMOUNT or rng.random() < 0.5 else rng.sample(skus, rng.randint(1, len(skus)))
    return rule(id, kind, value, listed, min_subtotal=rng.choice([0, 0, 500, 10**5]), code=code)


def test_price_lines_always_adds_up_never_below_zero():
    """Random carts and promotions: every line at 0 or more, the totals adding up exactly, one voucher
    at most, one automatic cart amount at most, one automatic per-unit promotion a line at most."""
    rng = random.Random(28)
    for _ in range(400):
        skus = [f"S{i}" for i in range(rng.randint(1, 6))]
        products = {
            sku: CachedProduct(sku, sku, rng.choice([1, 3, 5, 99, 999, 1000, 12345]), True, 0, "standard")
            for sku in skus
        }
        lines = {sku: rng.randint(1, 99) for sku in skus}
        promotions = [random_rule(rng, i, skus) for i in range(1, rng.randint(1, 6))]
        voucher = random_rule(rng, 100, skus, code="V") if rng.random() < 0.7 else None
        cart = price_lines(lines, products=products, promotions=promotions, voucher=voucher, now=NOW)
        assert_adds_up(cart)
        assert sum(1 for applied in cart.applied if applied.code) <= 1
        cart_amounts = {p.id for p in promotions if p.kind == CART_AMOUNT}
        assert sum(1 for applied in cart.applied if applied.promotion_id in cart_amounts) <= 1
        per_unit = {p.id for p in promotions if p.kind != CART_AMOUNT}
        for line in cart.lines:
            assert sum(1 for pid, _ in line.discounts if pid in per_unit) <= 1


# --- through the hot cache ----------------------------------------------------------------------


@pytest.mark.django_db
def test_cached_promotions_cost_one_query_cold_and_none_warm(django_capture_on_commit_callbacks):
    mug = ProductFactory(sku="MUG")
    with django_capture_on_commit_callbacks(execute=True):
        automatic = PromotionFactory(scope=Promotion.Scope.SKUS, products=[mug], value=15)
        voucher = PromotionFactory(code="SPRING", kind=Promotion.Kind.CART_AMOUNT, value=500, usage_limit=10)
    hot_cache.clear()
    with CaptureQueriesContext(connection) as cold:
        promotions = cached_promotions()
    assert len(cold) == 1
    assert [(p.id, p.skus, p.value) for p in promotions.automatic] == [(automatic.id, frozenset({"MUG"}), 15)]
    assert voucher.id not in {p.id for p in promotions.automatic}  # codes are looked up by code, never all loaded
    with CaptureQueriesContext(connection) as warm:
        assert cached_promotions() is promotions
        assert [p.id for p in active_promotions(now=datetime.now(UTC))] == [automatic.id]
    assert len(warm) == 0


@pytest.mark.django_db
def test_cached_promotions_keep_what_has_not_ended_and_price_by_the_window(django_capture_on_commit_callbacks):
    now = datetime.now(UTC)
    with django_capture_on_commit_callbacks(execute=True):
        PromotionFactory(starts_at=now - timedelta(days=2), ends_at=now - timedelta(days=1))  # over: not loaded
        upcoming = PromotionFactory(starts_at=now + timedelta(hours=1))
    promotions = cached_promotions()
    assert [p.id for p in promotions.automatic] == [upcoming.id]
    # It starts without anything being told: the window is checked when pricing.
    assert active_promotions(now=now) == ()
    assert [p.id for p in active_promotions(now=now + timedelta(hours=1))] == [upcoming.id]


@pytest.mark.django_db
def test_a_promotion_saved_deleted_ended_or_given_skus_moves_the_generation(redis, django_capture_on_commit_callbacks):
    mug = ProductFactory(sku="MUG")

    def generation():
        return int(redis.get("shop:cache-generation") or 0)

    def moves(change) -> int:
        before = generation()
        cached_promotions()
        with django_capture_on_commit_callbacks(execute=True):
            change()
        assert hot_cache.promotions is None  # dropped in this process
        return generation() - before

    promotion = PromotionFactory(scope=Promotion.Scope.SKUS)
    assert moves(lambda: promotion.products.add(mug)) == 2  # before the commit and after
    assert moves(lambda: Promotion.objects.get(pk=promotion.pk).save()) == 2
    assert moves(lambda: end_promotions(promotion_ids=[promotion.pk])) == 2
    assert moves(lambda: Promotion.objects.get(pk=promotion.pk).delete()) == 2
