"""shop/totals.py: the rules of its docstring (docs/architecture.md, "Totals"),
each with a worked example whose figures are worked out by hand in the comments;
then every identity over random carts (hypothesis), against an oracle that
recomputes the tax and the shipping with Fractions instead of calling the module."""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from shop.models import DiscountKind
from shop.pricing import PromotionRule, price_lines
from shop.totals import ShippingOption, TaxLine, price_order, tax_of

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
PERCENT, AMOUNT, SALE_PRICE = DiscountKind.PERCENT, DiscountKind.AMOUNT, DiscountKind.SALE_PRICE
CART_AMOUNT, FREE_SHIPPING = DiscountKind.CART_AMOUNT, DiscountKind.FREE_SHIPPING
STANDARD, REDUCED, ZERO = "standard", "reduced", "zero"
GB = {STANDARD: 2000, REDUCED: 500, ZERO: 0}
US = {STANDARD: 825}


@dataclass(frozen=True)
class Goods:
    """A product as price_order needs it (shop/totals.py Taxed)."""

    price: int
    weight_grams: int = 100
    tax_class: str = STANDARD


def rule(id, kind, value, skus=None, **fields) -> PromotionRule:  # noqa: A002 - the promotion's id
    return PromotionRule(id=id, name=f"promotion {id}", kind=kind, value=value, skus=skus and frozenset(skus), **fields)


def flat(price: int, **fields) -> ShippingOption:
    return ShippingOption(code="standard", name="Standard", countries=frozenset({"GB", "US"}), price=price, **fields)


def by_weight(*bands: tuple[int, int], **fields) -> ShippingOption:
    return flat(0, by_weight=True, bands=bands, **fields)


def order(lines, products, *, rates=GB, included=True, country="GB", **kwargs):
    return price_order(
        lines, products=products, rates=rates, country=country, prices_include_tax=included, now=NOW, **kwargs
    )


def figures(totals) -> list[tuple[str, int, int, int, int]]:
    return [(line.sku, line.rate, line.net, line.tax, line.gross) for line in totals.lines]


def shipping_figures(totals) -> tuple[int, int, int, int, int]:
    charge = totals.shipping
    return (charge.price, charge.discount, charge.net, charge.tax, charge.gross)


# --- (a), (b) one rate: tax included, tax excluded ---------------------------------------------


def test_price_order_extracts_the_tax_included_in_the_prices():
    totals = order({"MUG": 2}, {"MUG": Goods(1299)}, shipping=flat(499))
    # 2 x 1299 = 2598; 2598 x 2000 / 12000 = 433 exactly: net 2165.
    assert figures(totals) == [("MUG", 2000, 2165, 433, 2598)]
    # 499 x 2000 / 12000 = 83.17 -> 83: net 416.
    assert shipping_figures(totals) == (499, 0, 416, 83, 499)
    assert totals.shipping.charged == 499
    assert totals.shipping.taxes == (TaxLine(2000, 416, 83),)
    assert (totals.subtotal, totals.total, totals.tax) == (2598, 3097, 516)
    assert totals.tax_lines == (TaxLine(2000, 2581, 516),)  # 2165 + 416; 2581 + 516 = 3097
    assert (totals.prices_include_tax, totals.country, totals.weight_grams) == (True, "GB", 200)


def test_price_order_adds_the_tax_on_top_of_prices_without_it():
    totals = order({"MUG": 2}, {"MUG": Goods(1299)}, rates=US, included=False, country="US", shipping=flat(499))
    # 2598 x 825 / 10000 = 214.34 -> 214 on top: gross 2812.
    assert figures(totals) == [("MUG", 825, 2598, 214, 2812)]
    # 499 x 825 / 10000 = 41.17 -> 41 on top: gross 540.
    assert shipping_figures(totals) == (499, 0, 499, 41, 540)
    assert (totals.total, totals.tax) == (3352, 255)
    assert totals.tax_lines == (TaxLine(825, 3097, 255),)  # 3097 + 255 = 3352


def test_price_order_rounds_the_tax_per_line_not_per_order():
    products = {"A": Goods(3), "B": Goods(3), "C": Goods(3)}
    totals = order({"A": 1, "B": 1, "C": 1}, products)
    # 3 x 2000 / 12000 = 0.5 -> 1 on each line: 3, where once on the order's 9 it would be 1.5 -> 2.
    assert [line.tax for line in totals.lines] == [1, 1, 1]
    assert totals.tax_lines == (TaxLine(2000, 6, 3),)


# --- (c) several rates: shipping split in proportion -------------------------------------------


def test_price_order_splits_shipping_over_the_rates_of_the_goods_in_proportion():
    products = {"MUG": Goods(2000, tax_class=STANDARD), "BOOK": Goods(1000, tax_class=REDUCED)}
    totals = order({"MUG": 1, "BOOK": 1}, products, shipping=flat(500))
    # BOOK: 1000 x 500 / 10500 = 47.62 -> 48, net 952. MUG: 2000 x 2000 / 12000 = 333.33 -> 333, net 1667.
    assert figures(totals) == [("BOOK", 500, 952, 48, 1000), ("MUG", 2000, 1667, 333, 2000)]
    # 500 over 2000 : 1000 = 333.33 : 166.67; the floors make 499 and the unit left goes to the largest
    # remainder, the reduced part's: 333 and 167. 333 x 2000 / 12000 = 55.5 -> 56 (half up), net 277;
    # 167 x 500 / 10500 = 7.95 -> 8, net 159.
    assert totals.shipping.taxes == (TaxLine(2000, 277, 56), TaxLine(500, 159, 8))
    assert shipping_figures(totals) == (500, 0, 436, 64, 500)
    assert (totals.total, totals.tax) == (3500, 445)
    assert totals.tax_lines == (TaxLine(2000, 1944, 389), TaxLine(500, 1111, 56))  # 1944 + 1111 + 445 = 3500


def test_price_order_splits_shipping_tax_excluded_too():
    products = {"MUG": Goods(2000, tax_class=STANDARD), "BOOK": Goods(1000, tax_class=REDUCED)}
    totals = order({"MUG": 1, "BOOK": 1}, products, included=False, shipping=flat(500))
    # Lines: 2000 x 20% = 400; 1000 x 5% = 50. Shipping 333 x 20% = 66.6 -> 67; 167 x 5% = 8.35 -> 8.
    assert figures(totals) == [("BOOK", 500, 1000, 50, 1050), ("MUG", 2000, 2000, 400, 2400)]
    assert totals.shipping.taxes == (TaxLine(2000, 333, 67), TaxLine(500, 167, 8))
    assert shipping_figures(totals) == (500, 0, 500, 75, 575)
    assert (totals.total, totals.tax) == (4025, 525)
    assert totals.tax_lines == (TaxLine(2000, 2333, 467), TaxLine(500, 1167, 58))


def test_price_order_puts_the_shipping_of_goods_that_cost_nothing_at_their_highest_rate():
    products = {"MUG": Goods(2000, tax_class=STANDARD), "BOOK": Goods(1000, tax_class=REDUCED)}
    totals = order({"MUG": 1, "BOOK": 1}, products, promotions=[rule(1, PERCENT, 100)], shipping=flat(499))
    assert [line.gross for line in totals.lines] == [0, 0]
    # Nothing to split in proportion to: all 499 at 20%, 83 of tax (as in the first example).
    assert totals.shipping.taxes == (TaxLine(2000, 416, 83), TaxLine(500, 0, 0))
    assert (totals.total, totals.tax) == (499, 83)


# --- (d) discounts before tax -------------------------------------------------------------------


def test_price_order_taxes_the_goods_after_their_discounts():
    products = {"A": Goods(1000, tax_class=STANDARD), "B": Goods(1000, tax_class=REDUCED)}
    totals = order(
        {"A": 2, "B": 1},
        products,
        promotions=[rule(1, PERCENT, 10)],
        voucher=rule(9, CART_AMOUNT, 300, code="OFF"),
    )
    # 10% a unit: A 1800, B 900; then 300 off the 2700 left, in proportion: 200 and 100. A 1600, B 800.
    # A: 1600 x 2000 / 12000 = 266.67 -> 267 (not 333 on the catalog's 2000), net 1333.
    # B: 800 x 500 / 10500 = 38.10 -> 38, net 762.
    assert figures(totals) == [("A", 2000, 1333, 267, 1600), ("B", 500, 762, 38, 800)]
    assert [(a.promotion_id, a.code, a.amount) for a in totals.applied] == [(1, None, 300), (9, "OFF", 300)]
    assert totals.voucher.code == "OFF"
    assert (totals.subtotal, totals.total, totals.tax) == (3000, 2400, 305)
    assert totals.tax_lines == (TaxLine(2000, 1333, 267), TaxLine(500, 762, 38))
    assert totals.shipping is None


def test_price_order_taxes_a_discounted_line_on_top_when_prices_exclude_tax():
    totals = order(
        {"A": 2}, {"A": Goods(1299)}, rates=US, included=False, promotions=[rule(1, PERCENT, 10)], country="US"
    )
    # 10% of 1299 = 129.9 -> 130 a unit: 2 x 1169 = 2338; 2338 x 825 / 10000 = 192.89 -> 193.
    assert figures(totals) == [("A", 825, 2338, 193, 2531)]
    assert (totals.total, totals.tax) == (2531, 193)


# --- (e) free shipping --------------------------------------------------------------------------


def test_price_order_ships_free_from_free_over_compared_with_the_goods_after_discounts():
    method = flat(499, free_over=2000)
    exactly = order({"A": 2}, {"A": Goods(1000)}, shipping=method)
    assert shipping_figures(exactly) == (0, 0, 0, 0, 0)  # 2000 reaches 2000: free
    assert exactly.total == 2000 and exactly.shipping_discounts == ()
    # The catalog's 2000 reaches it, but after 10% off the goods cost 1800: shipping is charged.
    discounted = order({"A": 2}, {"A": Goods(1000)}, promotions=[rule(1, PERCENT, 10)], shipping=method)
    assert shipping_figures(discounted) == (499, 0, 416, 83, 499)
    assert discounted.total == 1800 + 499
    assert method.price_for(weight_grams=10, goods=1999) == 499


def test_free_over_counts_only_the_goods_that_ship():
    """A download (weight 0) costing 50.00 does not make a 5.00 parcel's shipping free."""
    products = {"MUG": Goods(500, weight_grams=350), "EBOOK": Goods(5000, weight_grams=0)}
    totals = order({"MUG": 1, "EBOOK": 1}, products, shipping=flat(499, free_over=4000))
    assert totals.shipping.price == 499 and totals.total == 5500 + 499


def test_price_order_takes_an_automatic_free_shipping_promotion_off_the_shipping():
    totals = order({"A": 1}, {"A": Goods(1000)}, promotions=[rule(1, FREE_SHIPPING, 100)], shipping=flat(499))
    assert shipping_figures(totals) == (499, 499, 0, 0, 0)
    assert totals.shipping.charged == 0
    assert totals.goods.applied == ()  # nothing off the goods
    assert [(a.promotion_id, a.code, a.amount) for a in totals.applied] == [(1, None, 499)]
    assert totals.shipping_discounts == totals.applied
    assert (totals.total, totals.tax) == (1000, 167)  # 1000 / 6 = 166.67 -> 167


def test_price_order_takes_a_free_shipping_percent_half_up():
    totals = order({"A": 1}, {"A": Goods(1000)}, promotions=[rule(1, FREE_SHIPPING, 50)], shipping=flat(499))
    # 50% of 499 = 249.5 -> 250 off: 249 charged; 249 / 6 = 41.5 -> 42 of tax, net 207.
    assert shipping_figures(totals) == (499, 250, 207, 42, 249)
    assert totals.total == 1249


def test_price_order_takes_the_best_automatic_free_shipping_promotion_only():
    promotions = [rule(3, FREE_SHIPPING, 30), rule(4, FREE_SHIPPING, 50), rule(5, FREE_SHIPPING, 50)]
    totals = order({"A": 1}, {"A": Goods(1000)}, promotions=promotions, shipping=flat(1000))
    assert [(a.promotion_id, a.amount) for a in totals.applied] == [(4, 500)]  # 50% beats 30%; the tie: lowest id
    assert totals.shipping.charged == 500


def test_price_order_takes_a_free_shipping_voucher_off_the_shipping():
    voucher = rule(9, FREE_SHIPPING, 100, code="SHIPFREE")
    totals = order({"A": 1}, {"A": Goods(1000)}, voucher=voucher, shipping=flat(499))
    assert shipping_figures(totals) == (499, 499, 0, 0, 0)
    assert totals.goods.voucher is None
    assert (totals.voucher.promotion_id, totals.voucher.code, totals.voucher.amount) == (9, "SHIPFREE", 499)
    assert totals.discounts() == [{"promotion_id": 9, "name": "promotion 9", "code": "SHIPFREE", "amount": 499}]


def test_price_order_stacks_a_free_shipping_voucher_on_what_the_automatic_one_left():
    totals = order(
        {"A": 1},
        {"A": Goods(1000)},
        promotions=[rule(1, FREE_SHIPPING, 50)],
        voucher=rule(9, FREE_SHIPPING, 50, code="HALF"),
        shipping=flat(499),
    )
    # 50% of 499 = 249.5 -> 250; then 50% of the 249 left = 124.5 -> 125. 124 charged.
    assert [(a.promotion_id, a.amount) for a in totals.applied] == [(1, 250), (9, 125)]
    assert totals.shipping.discount == 375 and totals.shipping.charged == 124
    # 124 / 6 = 20.67 -> 21, net 103.
    assert shipping_figures(totals) == (499, 375, 103, 21, 124)


def test_price_order_ignores_a_free_shipping_promotion_that_does_not_apply():
    products = {"A": Goods(1000)}
    hour = timedelta(hours=1)
    for promotion in (
        rule(1, FREE_SHIPPING, 100, starts_at=NOW + hour),  # not started
        rule(1, FREE_SHIPPING, 100, starts_at=NOW - hour, ends_at=NOW),  # ended at this very moment
        rule(1, FREE_SHIPPING, 100, min_subtotal=1001),  # the catalog subtotal below its minimum
        rule(1, FREE_SHIPPING, 100, skus=["B"]),  # none of its SKUs in the cart
        rule(1, FREE_SHIPPING, 100, code="CODE"),  # a voucher among the automatic ones, not given
    ):
        totals = order({"A": 1}, products, promotions=[promotion], shipping=flat(499))
        assert (totals.applied, totals.shipping.discount, totals.total) == ((), 0, 1499), promotion
    # Exactly the minimum, at catalog prices (though 10% off leaves 900): it applies.
    promotions = [rule(1, PERCENT, 10), rule(2, FREE_SHIPPING, 100, min_subtotal=1000)]
    totals = order({"A": 1}, products, promotions=promotions, shipping=flat(499))
    assert (totals.shipping.charged, totals.total) == (0, 900)


def test_price_order_ignores_a_free_shipping_voucher_that_does_not_apply():
    for voucher in (
        rule(9, FREE_SHIPPING, 100, code="LATER", starts_at=NOW + timedelta(seconds=1)),
        rule(9, FREE_SHIPPING, 100, code="BIG", min_subtotal=1001),
    ):
        totals = order({"A": 1}, {"A": Goods(1000)}, voucher=voucher, shipping=flat(499))
        assert (totals.applied, totals.voucher, totals.total) == ((), None, 1499), voucher.code


# --- (f), (g) weight -----------------------------------------------------------------------------


def test_shipping_option_prices_by_the_lightest_band_holding_the_weight():
    method = by_weight((500, 300), (2000, 600), (10_000, 1200))
    assert [method.price_for(weight_grams=grams, goods=1) for grams in (1, 500, 501, 2000, 2001, 10_000)] == [
        300,
        300,
        600,
        600,
        1200,
        1200,
    ]
    assert method.price_for(weight_grams=10_001, goods=1) is None


def test_price_order_weighs_the_goods_that_ship_with_their_quantities():
    method = by_weight((500, 300), (2000, 600), (10_000, 1200))
    products = {"MUG": Goods(1000, weight_grams=250), "CARD": Goods(500, weight_grams=0)}
    totals = order({"MUG": 3, "CARD": 5}, products, shipping=method)
    assert totals.weight_grams == 750  # 3 x 250; the card weighs nothing
    assert shipping_figures(totals) == (600, 0, 500, 100, 600)  # 600 / 6 = 100
    assert totals.total == 3000 + 2500 + 600


def test_price_order_refuses_goods_heavier_than_every_band():
    method = by_weight((500, 300), (2000, 600))
    with pytest.raises(ValueError, match="2001 g"):
        order({"MUG": 1}, {"MUG": Goods(1000, weight_grams=2001)}, shipping=method)


def test_shipping_option_cannot_carry_goods_heavier_than_every_band_even_past_free_over():
    # Free from 1000 does not make a method carry what none of its bands holds.
    method = by_weight((500, 300), (2000, 600), free_over=1000)
    assert method.price_for(weight_grams=2000, goods=1000) == 0
    assert method.price_for(weight_grams=2001, goods=1000) is None
    with pytest.raises(ValueError):
        order({"MUG": 1}, {"MUG": Goods(1000, weight_grams=2001)}, shipping=method)


def test_price_order_ships_nothing_for_goods_that_weigh_nothing():
    products = {"CARD": Goods(2500, weight_grams=0), "EBOOK": Goods(1000, weight_grams=0, tax_class=REDUCED)}
    totals = order({"CARD": 1, "EBOOK": 1}, products, shipping=flat(499), promotions=[rule(1, FREE_SHIPPING, 100)])
    assert (totals.shipping, totals.shipping_discounts, totals.weight_grams) == (None, (), 0)
    assert (totals.total, totals.tax) == (3500, 417 + 48)  # 2500 / 6 = 416.67 -> 417; 1000 / 21 = 47.62 -> 48
    # Even a method that could not carry anything: there is nothing to carry.
    assert order({"CARD": 1}, products, shipping=by_weight()).shipping is None


def test_price_order_taxes_shipping_at_the_rates_of_the_goods_that_ship_only():
    products = {"MUG": Goods(1000, tax_class=REDUCED), "CARD": Goods(9000, weight_grams=0, tax_class=STANDARD)}
    totals = order({"MUG": 1, "CARD": 1}, products, shipping=flat(420))
    # All 420 at the mug's 5% (the card ships nothing): 420 x 500 / 10500 = 20.
    assert totals.shipping.taxes == (TaxLine(500, 400, 20),)


# --- (h), (i) rates ------------------------------------------------------------------------------


def test_price_order_charges_no_tax_for_a_class_without_a_rate():
    products = {"A": Goods(1234, tax_class="luxury")}
    for included in (True, False):
        totals = order({"A": 2}, products, included=included, shipping=flat(499))
        assert figures(totals) == [("A", 0, 2468, 0, 2468)]
        assert totals.shipping.taxes == (TaxLine(0, 499, 0),)
        assert (totals.total, totals.tax, totals.tax_lines) == (2967, 0, (TaxLine(0, 2967, 0),))
    assert order({"A": 1}, products, rates={}).tax == 0


@pytest.mark.parametrize(
    ("amount", "rate", "tax"),
    [
        (3, 2000, 1),  # 3 / 6 = 0.5 -> 1
        (9, 2000, 2),  # 1.5 -> 2
        (15, 2000, 3),  # 2.5 -> 3
        (2, 2000, 0),  # 0.33 -> 0
        (4, 2000, 1),  # 0.67 -> 1
        (10, 500, 0),  # 10 / 21 = 0.476 -> 0
        (11, 500, 1),  # 0.524 -> 1
        (1, 10_000, 1),  # half of it: 0.5 -> 1
        (3, 10_000, 2),  # 1.5 -> 2
        (2, 10_000, 1),
        (10**9, 2000, 166_666_667),  # 166666666.67
        (0, 2000, 0),
        (999_999, 0, 0),
    ],
)
def test_tax_of_an_amount_including_it_rounds_half_up(amount, rate, tax):
    assert tax_of(amount, rate, included=True) == tax


@pytest.mark.parametrize(
    ("amount", "rate", "tax"),
    [
        (1, 5000, 1),  # 0.5 -> 1
        (3, 5000, 2),  # 1.5 -> 2
        (1, 4999, 0),  # 0.4999 -> 0
        (25, 2000, 5),
        (5, 1000, 1),  # 0.5 -> 1
        (15, 1000, 2),  # 1.5 -> 2
        (14, 1000, 1),  # 1.4 -> 1
        (2598, 825, 214),  # 214.335
        (1, 10_000, 1),  # 100%: the amount again
        (12_345, 10_000, 12_345),
        (0, 2000, 0),
        (999_999, 0, 0),
    ],
)
def test_tax_of_an_amount_excluding_it_rounds_half_up(amount, rate, tax):
    assert tax_of(amount, rate, included=False) == tax


def test_price_order_at_rates_zero_and_ten_thousand():
    products = {"A": Goods(1001, tax_class=ZERO), "B": Goods(1001, tax_class="full")}
    rates = {ZERO: 0, "full": 10_000}
    included = order({"A": 1, "B": 1}, products, rates=rates)
    # 1001 / 2 = 500.5 -> 501 of tax in B, net 500.
    assert figures(included) == [("A", 0, 1001, 0, 1001), ("B", 10_000, 500, 501, 1001)]
    excluded = order({"A": 1, "B": 1}, products, rates=rates, included=False)
    assert figures(excluded) == [("A", 0, 1001, 0, 1001), ("B", 10_000, 1001, 1001, 2002)]


# --- every identity over random carts ------------------------------------------------------------


def half_up(value: Fraction) -> int:
    return math.floor(value + Fraction(1, 2))


def expected_tax(amount: int, rate: int, included: bool) -> int:
    return half_up(Fraction(amount * rate, 10_000 + rate if included else 10_000))


def expected_split(amount: int, weights: list[int]) -> list[int]:
    """Largest remainder: the floors of the exact shares, then a unit each to the largest fractions
    (ties in the given order)."""
    exact = [Fraction(amount * weight, sum(weights)) for weight in weights]
    shares = [math.floor(share) for share in exact]
    by_fraction = sorted(range(len(weights)), key=lambda index: (-(exact[index] - shares[index]), index))
    for index in by_fraction[: amount - sum(shares)]:
        shares[index] += 1
    return shares


def applies(promotion: PromotionRule, skus, subtotal: int) -> bool:
    started = promotion.starts_at is None or promotion.starts_at <= NOW
    not_ended = promotion.ends_at is None or NOW < promotion.ends_at
    covers = promotion.skus is None or any(sku in promotion.skus for sku in skus)
    return started and not_ended and covers and subtotal >= promotion.min_subtotal


def expected_shipping_discount(price: int, promotions, voucher, skus, subtotal: int) -> list[tuple[int, int]]:
    """[(promotion id, off)]: the best automatic free_shipping (the highest percent, the lowest id), then
    the voucher on what is left."""
    taken = []
    automatic = [p for p in promotions if p.kind == FREE_SHIPPING and p.code is None and applies(p, skus, subtotal)]
    if automatic:
        best = min(automatic, key=lambda p: (-p.value, p.id))
        taken.append((best.id, half_up(Fraction(price * best.value, 100))))
    if voucher is not None and voucher.kind == FREE_SHIPPING and applies(voucher, skus, subtotal):
        left = price - sum(off for _, off in taken)
        taken.append((voucher.id, half_up(Fraction(left * voucher.value, 100))))
    return [(pid, off) for pid, off in taken if off > 0]


KINDS = [PERCENT, AMOUNT, SALE_PRICE, CART_AMOUNT, FREE_SHIPPING]
CLASSES = [STANDARD, REDUCED, ZERO]
SKUS = ["S0", "S1", "S2", "S3", "S4", "S5"]
WINDOWS = {
    "open": (None, None),
    "not started": (NOW + timedelta(seconds=1), None),
    "ended": (NOW - timedelta(days=1), NOW),
    "from now": (NOW, NOW + timedelta(days=1)),
}


def around(subtotal: int):
    """Thresholds (min_subtotal, free_over) near the cart's subtotal, so that they are met, just met,
    missed by one, or met only at catalog prices, as often as not."""
    return st.one_of(
        st.sampled_from([0, subtotal, subtotal + 1, max(subtotal - 1, 0), subtotal // 2, 10**10]),
        st.integers(0, subtotal + 1),
    )


@st.composite
def promotion_rules(
    draw, id: int, skus: list[str], subtotal: int, code: str | None = None, kinds=KINDS
) -> PromotionRule:  # noqa: A002
    kind = draw(st.sampled_from(kinds))
    if kind in (PERCENT, FREE_SHIPPING):
        value = draw(st.one_of(st.integers(1, 100), st.sampled_from([50, 100])))  # ties, halves, all of it
    else:
        value = draw(st.one_of(st.integers(0, 10**7), st.sampled_from([0, 1, 99, 500, 999, 10**10])))
    listed = None
    if kind != CART_AMOUNT and draw(st.booleans()):
        listed = draw(st.lists(st.sampled_from(SKUS), min_size=1, max_size=3, unique=True))
    starts_at, ends_at = WINDOWS[draw(st.sampled_from(["open", "open", "open", *WINDOWS]))]
    min_subtotal = draw(st.one_of(st.just(0), around(subtotal)))
    return rule(id, kind, value, listed, min_subtotal=min_subtotal, starts_at=starts_at, ends_at=ends_at, code=code)


@st.composite
def shipping_options(draw, subtotal: int) -> ShippingOption | None:
    kind = draw(st.sampled_from(["flat", "bands", "bands", None]))
    if kind is None:
        return None
    free_over = draw(st.one_of(st.none(), around(subtotal)))
    prices = st.one_of(st.integers(0, 10**6), st.sampled_from([1, 3, 499, 999]))
    if kind == "flat":
        return flat(draw(prices), free_over=free_over)
    limits = draw(st.lists(st.integers(0, 100_000), max_size=4, unique=True))
    if draw(st.integers(0, 9)) > 0:
        limits.append(3_000_000)  # most carts fit; some are too heavy
    bands = tuple((limit, draw(prices)) for limit in sorted(set(limits)))
    return by_weight(*bands, free_over=free_over)


@st.composite
def carts(draw) -> dict:
    skus = SKUS[: draw(st.integers(1, 6))]
    products = {
        sku: Goods(
            price=draw(st.one_of(st.integers(1, 10**7), st.integers(1, 100))),
            weight_grams=0 if draw(st.integers(0, 3)) == 3 else draw(st.integers(1, 5000)),
            tax_class=draw(st.sampled_from(CLASSES)),
        )
        for sku in skus
    }
    lines = {sku: draw(st.integers(1, 99)) for sku in skus}
    subtotal = sum(quantity * products[sku].price for sku, quantity in lines.items())
    rates = {
        tax_class: draw(st.one_of(st.integers(0, 10_000), st.sampled_from([0, 500, 2000, 5000, 10_000])))
        for tax_class in CLASSES
        if draw(st.integers(0, 4)) > 0  # sometimes a class has no rate
    }
    automatic = [draw(promotion_rules(id, skus, subtotal)) for id in range(1, draw(st.integers(0, 6)) + 1)]
    if draw(st.integers(0, 2)) > 0:  # shipping promotions more often
        automatic.append(draw(promotion_rules(len(automatic) + 1, skus, subtotal, kinds=[FREE_SHIPPING])))
    if draw(st.integers(0, 3)) == 3:  # a voucher among the automatic promotions: never applied
        automatic.append(draw(promotion_rules(50, skus, subtotal, code="LISTED", kinds=[FREE_SHIPPING, PERCENT])))
    voucher = draw(
        st.one_of(
            st.none(),
            promotion_rules(100, skus, subtotal, code="V"),
            promotion_rules(100, skus, subtotal, code="V", kinds=[FREE_SHIPPING]),
        )
    )
    return {
        "lines": lines,
        "products": products,
        "promotions": automatic,
        "voucher": voucher,
        "rates": rates,
        "included": draw(st.booleans()),
        "shipping": draw(shipping_options(subtotal)),
    }


@hypothesis_settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(cart=carts())
def test_price_order_always_adds_up(cart):
    """Random carts, rates, promotions, vouchers and shipping: every identity of the module's docstring,
    and every tax amount as recomputed here with Fractions."""
    lines, products, rates, shipping = cart["lines"], cart["products"], cart["rates"], cart["shipping"]
    included, promotions, voucher = cart["included"], cart["promotions"], cart["voucher"]
    other = {"rates": rates, "included": included, "shipping": shipping, "promotions": promotions, "voucher": voucher}
    goods = price_lines(lines, products=products, promotions=promotions, voucher=voucher, now=NOW)
    shipped = [line for line in goods.lines if products[line.sku].weight_grams > 0]
    weight = sum(products[line.sku].weight_grams * line.quantity for line in shipped)
    price = None
    if shipping is not None and shipped:
        if shipping.by_weight:
            price = next((band_price for up_to, band_price in shipping.bands if weight <= up_to), None)
            if price is None:
                assert shipping.price_for(weight_grams=weight, goods=goods.total) is None
                with pytest.raises(ValueError):
                    order(lines, products, **other)
                return
        else:
            price = shipping.price
        shipped_goods = sum(line.total for line in shipped)  # free_over: the goods it carries, not a download
        if shipping.free_over is not None and shipped_goods >= shipping.free_over:
            price = 0

    totals = order(lines, products, **other)

    # The goods: shop/pricing.py's, never below 0, adding up.
    assert totals.goods == goods
    assert totals.weight_grams == weight
    assert all(amount > 0 for line in goods.lines for _, amount in line.discounts)
    assert all(applied.amount > 0 for applied in totals.applied)
    assert totals.subtotal - goods.discount == sum(line.line.total for line in totals.lines) == goods.total
    assert all(line.line.total >= 0 for line in totals.lines)

    # Each line: its class's rate (0 without one), its tax half up, net + tax = gross.
    assert [line.sku for line in totals.lines] == sorted(lines)
    for line in totals.lines:
        assert line.rate == rates.get(products[line.sku].tax_class, 0)
        assert line.tax == expected_tax(line.line.total, line.rate, included)
        assert line.net + line.tax == line.gross
        assert (line.gross if included else line.net) == line.line.total

    # Shipping: its price, its discounts, split over the rates of the goods that ship, each part taxed.
    charge = totals.shipping
    if price is None:
        assert charge is None and totals.shipping_discounts == ()
    else:
        skus = list(lines)
        expected_off = expected_shipping_discount(price, promotions, voucher, skus, goods.subtotal)
        assert [(a.promotion_id, a.amount) for a in totals.shipping_discounts] == expected_off
        assert charge.price == price
        assert charge.discount == sum(off for _, off in expected_off)
        assert 0 <= charge.discount <= charge.price
        charged = charge.charged
        assert charged == price - charge.discount >= 0
        assert charge.net + charge.tax == charge.gross
        assert (charge.gross if included else charge.net) == charged
        assert sum(part.base for part in charge.taxes) == charge.net
        assert sum(part.amount for part in charge.taxes) == charge.tax
        taxed_lines = [line for line in totals.lines if products[line.sku].weight_grams > 0]
        part_rates = sorted({line.rate for line in taxed_lines}, reverse=True) if charged else []  # free: no part
        assert [part.rate for part in charge.taxes] == part_rates
        weights = [sum(line.line.total for line in taxed_lines if line.rate == rate) for rate in part_rates]
        if weights and sum(weights) == 0:
            weights = [1] + [0] * (len(weights) - 1)
        for part, share in zip(charge.taxes, expected_split(charged, weights), strict=True):
            assert part.amount == expected_tax(share, part.rate, included)
            assert part.base == (share - part.amount if included else share)

    # The order.
    shipping_gross = charge.gross if charge else 0
    shipping_tax = charge.tax if charge else 0
    assert totals.total == sum(line.gross for line in totals.lines) + shipping_gross
    assert totals.tax == sum(line.tax for line in totals.lines) + shipping_tax
    assert totals.tax == sum(tax_line.amount for tax_line in totals.tax_lines)
    assert sum(tax_line.base for tax_line in totals.tax_lines) + totals.tax == totals.total
    assert [tax_line.rate for tax_line in totals.tax_lines] == sorted({t.rate for t in totals.tax_lines}, reverse=True)
    assert 0 <= totals.tax <= totals.total
    assert sum(1 for applied in totals.applied if applied.code is not None) <= 1
