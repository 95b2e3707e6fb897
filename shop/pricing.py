"""What a cart costs: catalog prices, automatic promotions, at most one voucher.

One pure function, `price_lines`, prices lines for the cart view, checkout and
the queue writer alike; it reads nothing (the callers pass the products and the
promotions, from the hot cache: shop/selectors.py) and raises nothing for a
promotion that does not apply: it just does not apply.

The rules (docs/architecture.md, "Discounts"; tests/shop/test_pricing.py):

- Money is an integer in minor units; every step works on integers.
- **Which promotions take part.** A promotion applies between `starts_at`
  (included) and `ends_at` (excluded), and only if the cart's **subtotal at
  catalog prices** reaches its `min_subtotal`. That subtotal is the one the cart
  shows, so whether a promotion applies never depends on another one. A SKU
  promotion covers the lines of its SKUs; a cart promotion covers every line. A
  voucher (a promotion with a code) must also cover at least one line.
- **Per unit first.**
  1. Each line gets the **best automatic per-unit promotion** (`percent` or
     `amount`) that covers it: the one taking the most off that line; on a tie,
     the lowest promotion id. Automatic promotions never stack on one line.
  2. Then a **per-unit voucher** takes its part of each unit price that is left,
     on the lines it covers.
- **Then the cart.**
  3. **At most one automatic `cart_amount` promotion**: the one taking the most
     off (its value, capped at what is left); on a tie, the lowest id.
  4. Then a **`cart_amount` voucher**, capped at what is left.
  A cart amount is spread over the lines in proportion to what each line still
  costs, by the largest-remainder method (whole minor units; the units left
  over go to the largest remainders, ties in SKU order), so the lines add up to
  the order's total exactly.
- **Rounding.** A percentage of a unit price is rounded half up, per unit (15%
  of 999 is 149.85: 150 off each unit); an amount off a unit never takes it
  below 0. No line ever goes below 0, and a cart amount larger than what is left
  takes what is left.
- **Totals add up.** For each line, total = quantity x catalog unit price −
  its discounts; the cart's total is the sum of the lines' totals, and also
  subtotal − the sum of the applied promotions' amounts.
- A promotion appears under `applied` (and on the lines) only when it takes
  something off; so does the voucher (`PricedCart.voucher`), which is what
  checkout then counts as a use.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shop.models import DiscountKind


@dataclass(frozen=True)
class PromotionRule:
    """A promotion as pricing needs it (what the hot cache holds): no `uses`,
    which only the database knows for sure (shop/promotions.py)."""

    id: int
    name: str
    kind: str  # a DiscountKind value
    value: int  # percent (1-100), or minor units
    skus: frozenset[str] | None  # None: the whole cart
    min_subtotal: int = 0
    starts_at: datetime | None = None  # None: always started (tests, rules built by hand)
    ends_at: datetime | None = None  # None: open-ended
    code: str | None = None  # None: automatic
    usage_limit: int | None = None
    per_customer_limit: int | None = None

    @property
    def per_unit(self) -> bool:
        return self.kind in (DiscountKind.PERCENT, DiscountKind.AMOUNT, DiscountKind.SALE_PRICE)

    @property
    def off_the_cart(self) -> bool:
        return self.kind == DiscountKind.CART_AMOUNT

    def is_active_at(self, now: datetime) -> bool:
        return (self.starts_at is None or self.starts_at <= now) and (self.ends_at is None or now < self.ends_at)

    def covers(self, sku: str) -> bool:
        return self.skus is None or sku in self.skus

    def applies_to(self, skus: Iterable[str], subtotal: int) -> bool:
        """Whether the cart (its SKUs, its subtotal at catalog prices) qualifies."""
        return subtotal >= self.min_subtotal and any(self.covers(sku) for sku in skus)

    def unit_discount(self, unit_price: int) -> int:
        """What a per-unit promotion takes off one unit priced `unit_price`."""
        if self.kind == DiscountKind.PERCENT:
            return (unit_price * self.value + 50) // 100  # half up; value <= 100, so never more than the unit
        if self.kind == DiscountKind.SALE_PRICE:
            return max(unit_price - self.value, 0)  # the unit costs `value`; a sale price above the catalog's: none
        return min(self.value, unit_price)


class Priced(Protocol):
    price: int


@dataclass(frozen=True)
class LinePrice:
    sku: str
    quantity: int
    unit_price: int  # the catalog's
    discounts: tuple[tuple[int, int], ...] = ()  # (promotion id, minor units off this line), in the order applied

    @property
    def amount(self) -> int:
        """The line at the catalog price, before any discount."""
        return self.quantity * self.unit_price

    @property
    def discount(self) -> int:
        return sum(amount for _, amount in self.discounts)

    @property
    def total(self) -> int:
        return self.amount - self.discount


@dataclass(frozen=True)
class AppliedDiscount:
    promotion_id: int
    name: str
    code: str | None  # a voucher's code; None for an automatic promotion
    amount: int  # minor units off the cart, summed over its lines


@dataclass(frozen=True)
class PricedCart:
    lines: tuple[LinePrice, ...]  # in SKU order
    applied: tuple[AppliedDiscount, ...]  # in the order applied
    subtotal: int  # at catalog prices

    @property
    def discount(self) -> int:
        return sum(applied.amount for applied in self.applied)

    @property
    def total(self) -> int:
        return self.subtotal - self.discount

    @property
    def voucher(self) -> AppliedDiscount | None:
        return next((applied for applied in self.applied if applied.code is not None), None)

    def discounts(self) -> list[dict]:
        """The applied promotions as the cart, the order and its events show them
        (shop/apis.py DiscountSerializer documents it)."""
        return [
            {"promotion_id": applied.promotion_id, "name": applied.name, "code": applied.code, "amount": applied.amount}
            for applied in self.applied
        ]


def price_lines(
    lines: Mapping[str, int],
    *,
    products: Mapping[str, Priced],
    promotions: Iterable[PromotionRule] = (),
    voucher: PromotionRule | None = None,
    now: datetime,
) -> PricedCart:
    """The cart `lines` ({sku: quantity}, every SKU in `products`) priced at
    `now` with the automatic ones of `promotions` (vouchers among them are
    ignored) and `voucher`, by the rules of this module's docstring."""
    skus = sorted(lines)
    prices = {sku: products[sku].price for sku in skus}
    subtotal = sum(lines[sku] * prices[sku] for sku in skus)
    taking_part = [
        promotion
        for promotion in sorted(promotions, key=lambda promotion: promotion.id)
        if promotion.code is None and promotion.is_active_at(now) and promotion.applies_to(skus, subtotal)
    ]
    if voucher is not None and not (voucher.is_active_at(now) and voucher.applies_to(skus, subtotal)):
        voucher = None
    pricing = _Pricing(lines, skus, prices)

    # 1. The best automatic per-unit promotion of each line (sorted by id: the first best wins a tie).
    per_unit = [promotion for promotion in taking_part if promotion.per_unit]
    for sku in skus:
        best, best_off = None, 0
        for promotion in per_unit:
            if promotion.covers(sku) and (unit_off := promotion.unit_discount(prices[sku])) > best_off:
                best, best_off = promotion, unit_off
        if best is not None:
            pricing.take_per_unit(best, sku, best_off)
    # 2. A per-unit voucher, on what each unit still costs.
    if voucher is not None and voucher.per_unit:
        for sku in skus:
            if voucher.covers(sku):
                pricing.take_per_unit(voucher, sku, voucher.unit_discount(pricing.unit_left[sku]))
    # 3. At most one automatic amount off the cart, the largest (capped at what is left).
    cart_amounts = [promotion for promotion in taking_part if promotion.off_the_cart]
    if cart_amounts:
        left = pricing.left()
        best = max(cart_amounts, key=lambda promotion: (min(promotion.value, left), -promotion.id))
        pricing.take_from_cart(best, min(best.value, left))
    # 4. An amount-off-the-cart voucher.
    if voucher is not None and voucher.off_the_cart:
        pricing.take_from_cart(voucher, min(voucher.value, pricing.left()))
    return pricing.result(subtotal)


def largest_remainder(amount: int, weights: list[int]) -> list[int]:
    """`amount` split in proportion to `weights` (not all 0) in whole units: the
    floors first, then the units they left over (fewer than the weights with a
    remainder) one each to the largest remainders, ties in the given order. A
    share never passes its exact part by a unit, so never its weight when
    `amount` is at most their sum; the shares add up to `amount`."""
    whole = sum(weights)
    shares, remainders = [], []
    for index, weight in enumerate(weights):
        share, remainder = divmod(amount * weight, whole)
        shares.append(share)
        remainders.append((-remainder, index))
    for _, index in sorted(remainders)[: amount - sum(shares)]:
        shares[index] += 1
    return shares


class _Pricing:
    """The running state of price_lines: what each unit and line still costs,
    and what each promotion took from each line."""

    def __init__(self, lines: Mapping[str, int], skus: list[str], prices: dict[str, int]) -> None:
        self.quantities = {sku: lines[sku] for sku in skus}
        self.skus, self.prices = skus, prices
        self.unit_left = dict(prices)  # per unit, after the per-unit steps
        self.line_left = {sku: self.quantities[sku] * prices[sku] for sku in skus}
        self.taken: dict[str, list[tuple[int, int]]] = {sku: [] for sku in skus}
        self.promotions: dict[int, PromotionRule] = {}  # in the order they first took something

    def left(self) -> int:
        return sum(self.line_left.values())

    def take_per_unit(self, promotion: PromotionRule, sku: str, unit_off: int) -> None:
        if unit_off > 0:
            self.unit_left[sku] -= unit_off
            self._take(promotion, sku, unit_off * self.quantities[sku])

    def take_from_cart(self, promotion: PromotionRule, amount: int) -> None:
        """`amount` (at most what is left) spread over the lines in proportion to
        what each still costs: the largest-remainder method, ties in SKU order."""
        amount = min(amount, self.left())
        if amount <= 0:
            return
        shares = largest_remainder(amount, [self.line_left[sku] for sku in self.skus])
        for sku, share in zip(self.skus, shares, strict=True):
            self._take(promotion, sku, share)

    def _take(self, promotion: PromotionRule, sku: str, amount: int) -> None:
        if amount > 0:
            self.line_left[sku] -= amount
            self.taken[sku].append((promotion.id, amount))
            self.promotions.setdefault(promotion.id, promotion)

    def result(self, subtotal: int) -> PricedCart:
        lines = tuple(
            LinePrice(sku, self.quantities[sku], self.prices[sku], tuple(self.taken[sku])) for sku in self.skus
        )
        amounts: dict[int, int] = {}
        for line in lines:
            for promotion_id, amount in line.discounts:
                amounts[promotion_id] = amounts.get(promotion_id, 0) + amount
        applied = tuple(
            AppliedDiscount(promotion.id, promotion.name, promotion.code, amounts[promotion.id])
            for promotion in self.promotions.values()
        )
        return PricedCart(lines, applied, subtotal)
