from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime

from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Q
from django.utils import timezone

from core.hotcache import CachedProduct, hot_cache
from shop.exceptions import ShippingMethodUnavailable
from shop.models import Product, Promotion, ShippingMethod, ShippingRateBand, TaxRate
from shop.pricing import PromotionRule
from shop.totals import ShippingOption, Totals, price_order

CACHED_PRODUCT_FIELDS = ("sku", "name", "price", "is_active", "weight_grams", "tax_class_id")  # CachedProduct's


def cached_products(*, skus: Iterable[str]) -> dict[str, CachedProduct | None]:
    """Products by SKU from process memory; misses cost one query for all of them.
    A SKU that does not exist maps to None (and is cached as such)."""
    skus = list(skus)
    result = {sku: hot_cache.products.get(sku) for sku in skus if sku in hot_cache.products}
    missing = [sku for sku in skus if sku not in result]
    if missing:
        hot_cache.ensure_generation()
        found = {
            row[0]: CachedProduct(*row)
            for row in Product.objects.filter(sku__in=missing).values_list(*CACHED_PRODUCT_FIELDS)
        }
        for sku in missing:
            result[sku] = found.get(sku)
            hot_cache.remember(hot_cache.products, sku, result[sku])
    return result


@dataclass(frozen=True)
class CachedPromotions:
    """Every automatic promotion not ended when it was read. Windows are checked
    when pricing (PromotionRule.is_active_at), so a promotion starting or ending
    later needs no cache to be dropped. Vouchers are not held: a shop may have
    tens of thousands of codes, and one is looked up by its code
    (shop/promotions.py find_voucher)."""

    automatic: tuple[PromotionRule, ...]

    def active(self, now: datetime) -> tuple[PromotionRule, ...]:
        return tuple(promotion for promotion in self.automatic if promotion.is_active_at(now))


RULE_FIELDS = (
    "id",
    "name",
    "kind",
    "value",
    "scope",
    "min_subtotal",
    "starts_at",
    "ends_at",
    "code",
    "usage_limit",
    "per_customer_limit",
)


def cached_promotions() -> CachedPromotions:
    """The automatic promotions from process memory; the first read under a
    generation is one query (their SKUs aggregated into it). A promotion saved,
    deleted or ended moves the generation (shop/signals.py, shop/promotions.py)."""
    promotions = hot_cache.promotions
    if promotions is None:
        generation = hot_cache.ensure_generation()
        rows = (
            Promotion.objects.filter(Q(ends_at__isnull=True) | Q(ends_at__gt=timezone.now()), code__isnull=True)
            .annotate(sku_list=ArrayAgg("products", filter=Q(products__isnull=False), default=[]))
            .order_by("id")
            .values_list(*RULE_FIELDS, "sku_list", named=True)
        )
        promotions = CachedPromotions(automatic=tuple(promotion_rule(row, row.sku_list) for row in rows))
        if hot_cache.generation == generation:  # not dropped meanwhile by a change this read may have missed
            hot_cache.promotions = promotions
    return promotions


def cached_voucher(code: str) -> PromotionRule | None:
    """The voucher `code` names (upper-case, as stored) from process memory,
    None when there is none; a miss is one query. For a code already in a cart:
    a code typed in is looked up by find_voucher, which also reads its uses."""
    if code in hot_cache.vouchers:
        return hot_cache.vouchers[code]
    generation = hot_cache.ensure_generation()
    row = (
        Promotion.objects.filter(code=code)
        .annotate(sku_list=ArrayAgg("products", filter=Q(products__isnull=False), default=[]))
        .values_list(*RULE_FIELDS, "sku_list", named=True)
        .first()
    )
    voucher = None if row is None else promotion_rule(row, row.sku_list)
    if hot_cache.generation == generation:
        hot_cache.remember(hot_cache.vouchers, code, voucher)
    return voucher


def active_promotions(*, now: datetime) -> tuple[PromotionRule, ...]:
    """The automatic promotions active at `now` (no SQL once warm)."""
    return cached_promotions().active(now)


def promotion_rule(row, skus: Iterable[str]) -> PromotionRule:
    """A PromotionRule from a Promotion (or a row with its fields) and its SKUs."""
    return PromotionRule(
        id=row.id,
        name=row.name,
        kind=row.kind,
        value=row.value,
        skus=None if row.scope == Promotion.Scope.CART else frozenset(skus),
        min_subtotal=row.min_subtotal,
        starts_at=row.starts_at,
        ends_at=row.ends_at,
        code=row.code,
        usage_limit=row.usage_limit,
        per_customer_limit=row.per_customer_limit,
    )


@dataclass(frozen=True)
class Charges:
    """The tax rates and the active shipping methods, as pricing needs them."""

    rates: dict[tuple[str, str], tuple[tuple[date, int], ...]]  # (country, class) -> (valid from, bp), newest first
    methods: tuple[ShippingOption, ...]  # by code
    _in_force: dict = field(default_factory=dict, compare=False, repr=False)  # (country, day) -> rates_in's answer

    def rates_in(self, country: str, *, on: date) -> dict[str, int]:
        """{tax class: basis points} in force in `country` on `on` (worked out once per country and day)."""
        found = self._in_force.get((country, on))
        if found is None:
            found = self._in_force[(country, on)] = self._rates_in(country, on)
        return found

    def _rates_in(self, country: str, on: date) -> dict[str, int]:
        found = {}
        for (rate_country, tax_class), dated in self.rates.items():
            if rate_country == country:
                rate = next((rate for valid_from, rate in dated if valid_from <= on), None)
                if rate is not None:
                    found[tax_class] = rate
        return found

    def method(self, code: str) -> ShippingOption | None:
        return next((method for method in self.methods if method.code == code), None)

    def methods_to(self, country: str) -> tuple[ShippingOption, ...]:
        return tuple(method for method in self.methods if method.ships_to(country))


def shipping_for(code: str, *, country: str, weight_grams: int) -> ShippingOption:
    """The active method `code` if it ships to `country` and carries goods this
    heavy; else ShippingMethodUnavailable {code, country} (and weight_grams when too heavy)."""
    method = cached_charges().method(code)
    if method is None or not method.ships_to(country):
        raise ShippingMethodUnavailable(f"{code} does not ship to {country}.", code=code, country=country)
    if not method.carries(weight_grams):
        raise ShippingMethodUnavailable(
            f"{code} does not carry {weight_grams} g.", code=code, country=country, weight_grams=weight_grams
        )
    return method


def priced_order(
    lines: Mapping[str, int],
    *,
    products: Mapping[str, CachedProduct],
    voucher: PromotionRule | None,
    now: datetime,
    country: str,
    shipping: ShippingOption | None,
) -> Totals:
    """shop.totals.price_order with what it reads from the hot cache: the automatic
    promotions active at `now`, `country`'s tax rates that day, and the shop's
    PRICES_INCLUDE_TAX. The one way the cart and checkout price a cart."""
    return price_order(
        lines,
        products=products,
        promotions=active_promotions(now=now),
        voucher=voucher,
        now=now,
        rates=cached_charges().rates_in(country, on=now.date()),
        country=country,
        prices_include_tax=settings.PRICES_INCLUDE_TAX,
        shipping=shipping,
    )


def cached_charges() -> Charges:
    """Tax rates and active shipping methods from process memory; the first read
    under a generation is three queries (any change to them moves the
    generation: shop/signals.py)."""
    charges = hot_cache.charges
    if charges is None:
        generation = hot_cache.ensure_generation()
        rates: dict[tuple[str, str], list[tuple[date, int]]] = {}
        for country, tax_class, valid_from, rate in TaxRate.objects.order_by("-valid_from").values_list(
            "country", "tax_class_id", "valid_from", "rate"
        ):
            rates.setdefault((country, tax_class), []).append((valid_from, rate))
        bands: dict[int, list[tuple[int, int]]] = {}
        for method_id, up_to, price in ShippingRateBand.objects.order_by("up_to_grams").values_list(
            "method_id", "up_to_grams", "price"
        ):
            bands.setdefault(method_id, []).append((up_to, price))
        methods = tuple(
            ShippingOption(
                code=method.code,
                name=method.name,
                countries=frozenset(method.zone.countries),
                price=method.price,
                by_weight=method.pricing == ShippingMethod.Pricing.WEIGHT,
                bands=tuple(bands.get(method.id, ())),
                free_over=method.free_over,
                min_days=method.min_days,
                max_days=method.max_days,
            )
            for method in ShippingMethod.objects.filter(is_active=True).select_related("zone").order_by("code")
        )
        charges = Charges({key: tuple(dated) for key, dated in rates.items()}, methods)
        if hot_cache.generation == generation:
            hot_cache.charges = charges
    return charges
