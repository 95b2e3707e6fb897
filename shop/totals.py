"""What an order costs: the priced goods (shop/pricing.py), then shipping and
tax. Pure arithmetic on integers: it reads nothing (the callers pass products,
promotions, rates and the shipping method from the hot cache), and the cart
view, checkout and the queue writer all price a cart through `price_order`.

The rules (docs/architecture.md, "Totals"; tests/shop/test_totals.py checks each
identity over random carts):

- Money is an integer in minor units. Catalog prices (and shipping prices) are
  in the catalog's terms: tax included when PRICES_INCLUDE_TAX (the EU's way),
  tax excluded otherwise (the US's way).
- **Discounts come first, in the catalog's terms** (shop/pricing.py): a line's
  `total` is what it costs after its discounts, tax included or not as its price.
- **Tax per line, rounded half up**, at the rate of the line's tax class in the
  destination country: included, the tax is extracted,
  tax = round(total x rate / (10000 + rate)), net = total - tax, gross = total;
  excluded, it is added, tax = round(total x rate / 10000), net = total,
  gross = total + tax. So net + tax = gross on every line, exactly.
- **Shipping** costs the method's price for the cart (flat, or by weight band;
  free from its `free_over`, compared with the total after discounts of the
  goods it carries: a download does not make a parcel free),
  minus its discount (a `free_shipping` promotion or voucher, percent of the
  shipping, half up). A cart whose goods weigh nothing ships nothing.
- **Shipping is taxed at the rates of the goods it carries, in proportion**:
  its charge is split over the rates of the goods that ship, in proportion to
  what those goods cost (largest remainder, whole minor units), and each part
  is taxed as a line is. Goods that cost nothing leave it whole at the highest
  of their rates.
- **Totals add up**: total = sum of the lines' gross + shipping's gross;
  tax = sum of the lines' tax + shipping's tax = sum of the tax lines' amounts;
  the tax lines (per rate) have base = the net taxed at that rate, and the
  bases plus the tax make the total.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shop.models import DiscountKind
from shop.pricing import AppliedDiscount, LinePrice, PricedCart, PromotionRule, largest_remainder, price_lines


class Taxed(Protocol):
    price: int
    weight_grams: int
    tax_class: str


def tax_of(amount: int, rate: int, *, included: bool) -> int:
    """The tax in `amount` (included) or on it (excluded) at `rate` basis points, half up."""
    if included:
        return (2 * amount * rate + 10_000 + rate) // (2 * (10_000 + rate))
    return (amount * rate + 5_000) // 10_000


@dataclass(frozen=True)
class ShippingOption:
    """A shipping method as pricing needs it (what the hot cache holds)."""

    code: str
    name: str
    countries: frozenset[str]
    price: int  # flat
    by_weight: bool = False  # priced by `bands` instead of `price`
    bands: tuple[tuple[int, int], ...] = ()  # (up to grams, price), lightest first
    free_over: int | None = None
    min_days: int = 1
    max_days: int = 3

    def ships_to(self, country: str) -> bool:
        return country in self.countries

    def carries(self, weight_grams: int) -> bool:
        """Whether it takes goods this heavy (a weight-priced method: some band holds them)."""
        return not self.by_weight or any(weight_grams <= up_to for up_to, _ in self.bands)

    def price_for(self, *, weight_grams: int, goods: int) -> int | None:
        """What it charges for goods weighing `weight_grams` and costing `goods`
        (after discounts); None when it cannot carry them (no band holds that
        weight, free or not)."""
        if not self.carries(weight_grams):
            return None
        if self.free_over is not None and goods >= self.free_over:
            return 0
        if not self.by_weight:
            return self.price
        return next(price for up_to, price in self.bands if weight_grams <= up_to)


@dataclass(frozen=True)
class TaxedLine:
    line: LinePrice
    rate: int  # basis points
    net: int
    tax: int
    gross: int

    @property
    def sku(self) -> str:
        return self.line.sku


@dataclass(frozen=True)
class TaxLine:
    rate: int  # basis points
    base: int  # the net taxed at this rate
    amount: int  # the tax

    def as_json(self) -> dict:
        return {"rate": self.rate, "base": self.base, "amount": self.amount}


@dataclass(frozen=True)
class ShippingCharge:
    code: str
    name: str
    price: int  # the method's, for this cart, before its discount (catalog terms)
    discount: int
    net: int
    tax: int
    gross: int
    taxes: tuple[TaxLine, ...]  # its parts per rate

    @property
    def charged(self) -> int:
        """After the discount, in catalog terms."""
        return self.price - self.discount

    def as_json(self) -> dict:
        return {
            "code": self.code,
            "name": self.name,
            "price": self.price,
            "discount": self.discount,
            "net": self.net,
            "tax": self.tax,
            "gross": self.gross,
            "taxes": [part.as_json() for part in self.taxes],
        }


@dataclass(frozen=True)
class Totals:
    goods: PricedCart  # the lines after their discounts (shop/pricing.py)
    lines: tuple[TaxedLine, ...]  # in SKU order
    shipping: ShippingCharge | None
    shipping_discounts: tuple[AppliedDiscount, ...]
    prices_include_tax: bool
    country: str
    weight_grams: int  # of the goods that ship

    @property
    def subtotal(self) -> int:
        """The goods at catalog prices."""
        return self.goods.subtotal

    @property
    def applied(self) -> tuple[AppliedDiscount, ...]:
        return self.goods.applied + self.shipping_discounts

    @property
    def voucher(self) -> AppliedDiscount | None:
        return next((applied for applied in self.applied if applied.code is not None), None)

    def discounts(self) -> list[dict]:
        return [
            {"promotion_id": each.promotion_id, "name": each.name, "code": each.code, "amount": each.amount}
            for each in self.applied
        ]

    @property
    def tax(self) -> int:
        return sum(line.tax for line in self.lines) + (self.shipping.tax if self.shipping else 0)

    @property
    def total(self) -> int:
        return sum(line.gross for line in self.lines) + (self.shipping.gross if self.shipping else 0)

    @property
    def tax_lines(self) -> tuple[TaxLine, ...]:
        """Per rate, highest first: the net taxed at it and the tax."""
        parts = [TaxLine(line.rate, line.net, line.tax) for line in self.lines]
        return by_rate([*parts, *(self.shipping.taxes if self.shipping else ())])


def by_rate(parts: Iterable[TaxLine]) -> tuple[TaxLine, ...]:
    """The parts summed per rate, highest rate first."""
    sums: dict[int, tuple[int, int]] = {}
    for part in parts:
        base, amount = sums.get(part.rate, (0, 0))
        sums[part.rate] = (base + part.base, amount + part.amount)
    return tuple(TaxLine(rate, *sums[rate]) for rate in sorted(sums, reverse=True))


def tax_lines(parts: Iterable[tuple[int, int, int]], shipping: dict | None) -> list[dict]:
    """An order's tax per rate, highest first ({"rate", "base", "amount"}) as its
    JSON says it: its items' parts (rate, net, tax) and its shipping's (the
    ShippingCharge's JSON, or None). The amounts add up to the order's tax."""
    shipping_parts = [TaxLine(**part) for part in (shipping or {}).get("taxes", ())]
    return [line.as_json() for line in by_rate([*(TaxLine(*part) for part in parts), *shipping_parts])]


def shipping_weight(lines: Mapping[str, int], products: Mapping[str, Taxed]) -> int:
    """What the goods that ship weigh, in grams: 0, the cart needs no shipping."""
    return sum(products[sku].weight_grams * quantity for sku, quantity in lines.items())


def price_order(
    lines: Mapping[str, int],
    *,
    products: Mapping[str, Taxed],
    promotions: Iterable[PromotionRule] = (),
    voucher: PromotionRule | None = None,
    now: datetime,
    rates: Mapping[str, int],
    country: str,
    prices_include_tax: bool,
    shipping: ShippingOption | None = None,
) -> Totals:
    """The cart `lines` ({sku: quantity}, every SKU in `products`) priced at `now`
    (shop/pricing.py price_lines: the goods and their discounts), taxed at
    `rates` ({tax class: basis points} in `country`; a class missing: 0), with
    `shipping` for the goods that ship, discounted by the best active automatic
    `free_shipping` promotion and the voucher if it is one, by the module's rules.
    A `shipping` that cannot carry the goods (ShippingOption.carries their
    shipping_weight) is the caller's to refuse first; here it is a ValueError."""
    promotions = tuple(promotions)
    goods = price_lines(lines, products=products, promotions=promotions, voucher=voucher, now=now)
    included = prices_include_tax
    taxed = tuple(_taxed(line, rates.get(products[line.sku].tax_class, 0), included) for line in goods.lines)
    shipped = [line for line in taxed if products[line.sku].weight_grams > 0]
    weight = sum(products[line.sku].weight_grams * line.line.quantity for line in shipped)
    charge, applied = None, ()
    if shipping is not None and shipped:
        price = shipping.price_for(weight_grams=weight, goods=sum(line.line.total for line in shipped))
        if price is None:
            raise ValueError(f"{shipping.code} cannot carry {weight} g")
        skus = list(lines)
        qualifying = [
            each
            for each in (*promotions, *((voucher,) if voucher else ()))
            if each.kind == DiscountKind.FREE_SHIPPING
            and each.is_active_at(now)
            and each.applies_to(skus, goods.subtotal)
            and (each.code is None or each is voucher)
        ]
        discount, applied = _shipping_discount(price, qualifying)
        charge = _shipping_charge(shipping, price, discount, shipped, included)
    return Totals(goods, taxed, charge, applied, included, country, weight)


def _taxed(line: LinePrice, rate: int, included: bool) -> TaxedLine:
    tax = tax_of(line.total, rate, included=included)
    if included:
        return TaxedLine(line, rate, line.total - tax, tax, line.total)
    return TaxedLine(line, rate, line.total, tax, line.total + tax)


def _shipping_discount(price: int, promotions: Iterable[PromotionRule]) -> tuple[int, tuple[AppliedDiscount, ...]]:
    """The best automatic shipping promotion (the most off; on a tie the lowest id),
    then a shipping voucher on what is left: at most one of each, as for goods."""
    candidates = sorted(
        (each for each in promotions if each.kind == DiscountKind.FREE_SHIPPING), key=lambda each: each.id
    )
    automatic = [each for each in candidates if each.code is None]
    voucher = next((each for each in candidates if each.code is not None), None)
    taken, applied = 0, []
    if automatic:
        best = max(automatic, key=lambda each: (each.value, -each.id))
        if off := _percent(price, best.value):
            taken, applied = off, [AppliedDiscount(best.id, best.name, None, off)]
    if voucher is not None and (off := _percent(price - taken, voucher.value)):
        taken += off
        applied.append(AppliedDiscount(voucher.id, voucher.name, voucher.code, off))
    return taken, tuple(applied)


def _percent(amount: int, percent: int) -> int:
    return (amount * percent + 50) // 100


def _shipping_charge(
    method: ShippingOption, price: int, discount: int, shipped: list[TaxedLine], included: bool
) -> ShippingCharge:
    charged = price - discount
    if charged == 0:  # free: no tax, and no part at any rate
        return ShippingCharge(method.code, method.name, price, discount, 0, 0, 0, ())
    rates = sorted({line.rate for line in shipped}, reverse=True)
    weights = [sum(line.line.total for line in shipped if line.rate == rate) for rate in rates]
    if sum(weights) == 0:
        weights = [1] + [0] * (len(rates) - 1)  # goods that cost nothing: all at the highest rate
    parts = []
    for rate, part in zip(rates, largest_remainder(charged, weights), strict=True):
        tax = tax_of(part, rate, included=included)
        parts.append(TaxLine(rate, part - tax, tax) if included else TaxLine(rate, part, tax))
    net = sum(part.base for part in parts)
    tax = sum(part.amount for part in parts)
    return ShippingCharge(method.code, method.name, price, discount, net, tax, net + tax, tuple(parts))
