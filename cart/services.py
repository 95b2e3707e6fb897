import hashlib
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta

from django.conf import settings
from django.utils import timezone
from redis.exceptions import RedisError

from cart import storage
from cart.exceptions import CartTokenUnknown, InactiveProduct, UnknownProduct
from cart.storage import StoredCart
from core import ratelimit
from core.hotcache import CachedProduct, hot_cache
from inventory import gate
from inventory.services.flash_sales import gate_rules
from inventory.stock_hints import fresh_available_hints, remember_available
from shop.established import is_established
from shop.exceptions import ShippingMethodUnavailable, ShippingMethodUnknown, VoucherRefused
from shop.models import Product
from shop.pricing import PromotionRule
from shop.promotions import check_voucher, find_voucher
from shop.selectors import (
    CACHED_PRODUCT_FIELDS,
    cached_charges,
    cached_products,
    cached_promotions,
    cached_voucher,
    priced_order,
    shipping_for,
)
from shop.services import default_address
from shop.totals import shipping_weight

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CartLine:
    sku: str
    name: str
    quantity: int
    unit_price: int  # the catalog's
    discount: int  # minor units off the whole line (its promotions)
    line_total: int  # quantity x unit_price - discount, in the catalog's terms
    tax_rate: int  # basis points
    net: int
    tax: int
    gross: int
    in_stock: bool


@dataclass(frozen=True)
class PricedCart:
    items: list[CartLine]
    currency: str
    country: str  # whose tax rates price it: where it ships, or SHOP_TAX_COUNTRY
    prices_include_tax: bool
    warnings: list[dict] = field(default_factory=list)
    subtotal: int = 0  # at catalog prices
    discounts: list[dict] = field(default_factory=list)  # shop.totals.Totals.discounts()
    shipping: dict | None = None  # {"code", "name", "price", "discount", "net", "tax", "gross", "taxes", ...}
    needs_shipping: bool = False  # some of its goods weigh something
    tax: int = 0
    tax_lines: list[dict] = field(default_factory=list)  # [{"rate", "base", "amount"}], highest rate first
    total: int = 0  # the lines' gross + shipping's gross: what checkout charges
    voucher: dict | None = None  # {"code", "error"}: the code the cart holds, and why checkout would refuse it
    # What the API made of it (its JSON, rendered once): a priced cart is kept and served again (_price).
    rendered: dict = field(default_factory=dict, compare=False, repr=False)


MAX_PRICED_CARTS = 10_000  # carts priced and kept per process (a few kB each)


@dataclass(frozen=True)
class _Kept:
    cart: PricedCart
    generation: str
    until: datetime  # the first moment time alone could change its prices


def _price(cart: StoredCart, products: Mapping[str, CachedProduct | None], available: Mapping[str, int]) -> PricedCart:
    """The cart priced (_price_now), or as it was priced before in this process:
    a cart is read far more often than it changes, and the same lines, voucher,
    shipping and stock hints under the same cache generation (any change to a
    product, promotion, rate or method moves it) cost the same until a
    promotion's or the voucher's window opens or closes, or the day (and with
    it a tax rate) changes."""
    if not cart.lines:
        return _price_now(cart, products, available, timezone.now())  # nothing to price, nothing to read
    in_stock = tuple(available.get(sku, 0) >= quantity for sku, quantity in sorted(cart.lines.items()))
    key = (tuple(sorted(cart.lines.items())), cart.voucher, cart.shipping, in_stock)
    now, generation = timezone.now(), hot_cache.generation
    kept = hot_cache.priced_carts.get(key)
    if kept is not None and kept.generation == generation and now < kept.until:
        return kept.cart
    priced = _price_now(cart, products, available, now)
    if generation is not None and hot_cache.generation == generation:  # not dropped meanwhile
        until = _prices_change_after(now, voucher=cart.voucher)
        if len(hot_cache.priced_carts) >= MAX_PRICED_CARTS:
            hot_cache.priced_carts.clear()
        hot_cache.priced_carts[key] = _Kept(priced, generation, until)
    return priced


def _prices_change_after(now: datetime, *, voucher: str | None) -> datetime:
    """The next window edge of an automatic promotion or of the voucher, or the next day (tax rates are by day)."""
    rules = [*cached_promotions().automatic, *([cached_voucher(voucher)] if voucher else [])]
    edges = [edge for rule in rules if rule for edge in (rule.starts_at, rule.ends_at) if edge and edge > now]
    tomorrow = datetime.combine(now.date() + timedelta(days=1), time.min, tzinfo=now.tzinfo)
    return min([*edges, tomorrow])


def _price_now(
    cart: StoredCart, products: Mapping[str, CachedProduct | None], available: Mapping[str, int], now: datetime
) -> PricedCart:
    """The cart as checkout would charge it at `now`: shop.totals.price_order over the
    active products, with the automatic promotions, the cart's voucher, its
    shipping method and the tax rates of the country it ships to (all from the
    hot cache: no query once warm). Unknown and inactive SKUs are warnings and
    take no part; a voucher checkout would refuse takes no part either, and
    says why (its uses are counted at checkout: a used-up voucher shows there);
    so does a shipping method that does not ship there or cannot carry the cart."""
    lines = cart.lines
    priced, warnings = {}, []
    for sku in sorted(lines):
        product = products.get(sku)
        if product is None:
            warnings.append({"sku": sku, "code": "unknown_sku", "message": "This product no longer exists."})
        elif not product.is_active:
            warnings.append({"sku": sku, "code": "inactive_sku", "message": "This product is no longer on sale."})
        else:
            priced[sku] = lines[sku]
    currency, included = settings.SHOP_CURRENCY, settings.PRICES_INCLUDE_TAX
    code, country = cart.shipping or (None, settings.SHOP_TAX_COUNTRY)
    voucher, voucher_json = _cart_voucher(cart.voucher, now=now, lines=priced, products=products)
    if not priced:  # nothing to price: no promotions to read
        return PricedCart([], currency, country, included, warnings=warnings, voucher=voucher_json)
    shipping, weight = None, shipping_weight(priced, products)
    if code is not None and weight:
        try:
            shipping = shipping_for(code, country=country, weight_grams=weight)
        except ShippingMethodUnavailable as refused:
            warnings.append({"sku": None, "code": refused.code, "message": refused.message})
    totals = priced_order(priced, products=products, voucher=voucher, now=now, country=country, shipping=shipping)
    items = [
        CartLine(
            sku=line.sku,
            name=products[line.sku].name,
            quantity=line.line.quantity,
            unit_price=line.line.unit_price,
            discount=line.line.discount,
            line_total=line.line.total,
            tax_rate=line.rate,
            net=line.net,
            tax=line.tax,
            gross=line.gross,
            in_stock=available.get(line.sku, 0) >= line.line.quantity,
        )
        for line in totals.lines
    ]
    return PricedCart(
        items=items,
        currency=currency,
        country=country,
        prices_include_tax=included,
        warnings=warnings,
        subtotal=totals.subtotal,
        discounts=totals.discounts(),
        shipping=totals.shipping and {**totals.shipping.as_json(), "country": country},
        needs_shipping=weight > 0,
        tax=totals.tax,
        tax_lines=[line.as_json() for line in totals.tax_lines],
        total=totals.total,
        voucher=voucher_json,
    )


def _cart_voucher(
    code: str | None, *, now, lines: Mapping[str, int], products: Mapping[str, CachedProduct | None]
) -> tuple[PromotionRule | None, dict | None]:
    """The cart's voucher, if it applies to the cart now, and how the cart shows it."""
    if code is None:
        return None, None
    try:
        voucher = check_voucher(cached_voucher(code), code, now=now, lines=lines, products=products)
        return voucher, {"code": code, "error": None}
    except VoucherRefused as refused:
        return None, {"code": code, "error": {"code": refused.code, "message": refused.message}}


def catalog_for(skus: list[str]) -> tuple[dict[str, CachedProduct | None], dict[str, int]]:
    """Products (generation-checked cache) and stock hints for the cart's SKUs:
    no query once warm, else one query for everything missing."""
    products = {sku: hot_cache.products[sku] for sku in skus if sku in hot_cache.products}
    available = fresh_available_hints(skus=skus)
    missing = [sku for sku in skus if sku not in products or sku not in available]
    if missing:
        hot_cache.ensure_generation()
        rows = Product.objects.filter(sku__in=missing).values_list(*CACHED_PRODUCT_FIELDS, "stock__available")
        read = {}
        for *fields, stock in rows:
            products[fields[0]] = CachedProduct(*fields)
            read[fields[0]] = stock or 0
        for sku in missing:
            products.setdefault(sku, None)
            hot_cache.remember(hot_cache.products, sku, products[sku])
        remember_available(read)
        available.update(read)
    return products, available


def get_cart(*, customer_id: int) -> PricedCart:
    """One Redis call (the lines, with the cache-generation check); prices and
    promotions from the checked cache, so no query once warm, and otherwise one
    for the products and stock hints missing and one for the promotions."""
    cart = storage.read_cart(customer_id=customer_id, generation=hot_cache.ensure_generation())
    return _price(cart, *catalog_for(list(cart.lines)))


def set_cart_item(*, customer_id: int, sku: str, quantity: int) -> PricedCart:
    """Set the absolute quantity of one line (idempotent); 0 removes it."""
    counted = _check_writable(sku=sku, quantity=quantity, count=lambda: storage.count_write(customer_id=customer_id))
    _editing(customer_id, sku)
    cart = storage.write_line(
        customer_id=customer_id,
        sku=sku,
        quantity=quantity,
        generation=hot_cache.ensure_generation(),
        counted=counted,
    )
    _edited(customer_id, sku)
    return _price(cart, *catalog_for(list(cart.lines)))


def _editing(customer_id: int, sku: str) -> None:
    """A flash-sale line of the shopper's cart is about to change: the processes
    remembering a refusal of this cart hear of it (gate.note_cart_edit) before
    the write and again after it (_edited), so that none keeps a memory of the
    cart as it was. GateUnavailable (503) when the gate cannot count it: nothing
    is written."""
    if sku in gate_rules():
        try:
            gate.note_cart_edit(customer_id)
        except RedisError as exc:
            raise gate.GateUnavailable(sku=sku) from exc


def _edited(customer_id: int, sku: str | None = None) -> None:
    """After the write (any line when `sku` is None: a merge): the second count,
    best effort. Without it, a memory made in the instant between the first count
    and the write lasts at most its bound (orders/services/admission.py, RefusalMemory)."""
    if sku is not None and sku not in gate_rules():
        return
    try:
        gate.note_cart_edit(customer_id)
    except RedisError:
        logger.warning("cart edit of customer %s not counted in the gate", customer_id, exc_info=True)


def _check_writable(*, sku: str, quantity: int, count) -> bool:
    """UnknownProduct or InactiveProduct for a line that cannot be written;
    returns whether the write was counted here (`count()`). A SKU this process
    does not know as a product costs a query (and a cache entry): the write is
    counted against the writer's limit before, not after, so that made-up SKUs
    cannot be sent without limit. A known product's write is counted by the
    write script itself (one round-trip)."""
    product = hot_cache.products.get(sku)
    counted = product is None
    if counted:
        count()
        product = cached_products(skus=[sku])[sku]
    if product is None:
        raise UnknownProduct(sku=sku)
    if quantity and not product.is_active:
        raise InactiveProduct(sku=sku)
    return counted


_GUEST_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32): 256 random bits


def _guest_digest(token: str) -> str:
    if not _GUEST_TOKEN.fullmatch(token):
        raise CartTokenUnknown()  # not one we could have handed out: no Redis call
    return hashlib.sha256(token.encode()).hexdigest()


def get_guest_cart(*, token: str) -> PricedCart:
    cart = storage.guest_read_cart(digest=_guest_digest(token), generation=hot_cache.ensure_generation())
    return _price(cart, *catalog_for(list(cart.lines)))


def set_guest_cart_item(*, token: str | None, sku: str, quantity: int, address: str) -> tuple[PricedCart, str]:
    """set_cart_item for a guest: without a token, a new guest cart and its token
    (returned with the cart: the only moment the token exists). Limited per token
    and per client address."""
    counted = _check_writable(sku=sku, quantity=quantity, count=lambda: storage.count_write(address=address))
    create = token is None
    if create:
        token = secrets.token_urlsafe(32)
    cart = storage.guest_write_line(
        digest=_guest_digest(token),
        sku=sku,
        quantity=quantity,
        generation=hot_cache.ensure_generation(),
        address=address,
        create=create,
        counted=counted,
    )
    return _price(cart, *catalog_for(list(cart.lines))), token


def remove_guest_cart_item(*, token: str, sku: str, address: str) -> None:
    storage.guest_write_line(
        digest=_guest_digest(token),
        sku=sku,
        quantity=0,
        generation=hot_cache.ensure_generation(),
        address=address,
        create=False,
    )


def merge_guest_cart(*, token: str, customer_id: int) -> int:
    """The guest cart into the shopper's, once (a used token is dead): the lines merged."""
    merged = storage.merge_guest_cart(digest=_guest_digest(token), customer_id=customer_id)
    if merged:
        _edited(customer_id)
    return merged


def remove_cart_item(*, customer_id: int, sku: str) -> None:
    _editing(customer_id, sku)
    storage.write_line(customer_id=customer_id, sku=sku, quantity=0, generation=hot_cache.ensure_generation())
    _edited(customer_id, sku)


def set_voucher(*, code: str, address: str, customer_id: int | None = None, token: str | None = None) -> PricedCart:
    """Enter a voucher code in the shopper's cart (`customer_id`) or a guest's
    (`token`): one attempt counted against the shopper's (or token's) and the
    client address's limits first (RateLimited), then the code looked up (one
    query) and refused with its 422 (find_voucher) or kept with the cart,
    replacing the one it held."""
    cart_key, live, per_shopper = _voucher_target(customer_id=customer_id, token=token)
    generation = hot_cache.ensure_generation()
    cart = storage.voucher_attempt(
        cart=cart_key,
        live=live,
        generation=generation,
        per_shopper=per_shopper,
        # An established shopper's attempts count against their own window only (shop/established.py).
        per_address=ratelimit.window(None if is_established(customer_id=customer_id) else "voucher_address", address),
    )
    products, _ = catalog_for(list(cart.lines))
    on_sale = {sku: q for sku, q in cart.lines.items() if products.get(sku) is not None and products[sku].is_active}
    voucher = find_voucher(code, now=timezone.now(), customer_id=customer_id, lines=on_sale, products=products)
    hot_cache.remember(hot_cache.vouchers, voucher.code, voucher)
    ttl = settings.CART_TTL_SECONDS if customer_id is not None else settings.GUEST_CART_TTL_SECONDS
    cart = storage.set_voucher(cart=cart_key, live=live, generation=generation, code=voucher.code, ttl=ttl)
    return _price(cart, *catalog_for(list(cart.lines)))


def remove_voucher(*, customer_id: int | None = None, token: str | None = None) -> None:
    """The cart's voucher, if any, taken out."""
    cart_key, live, _ = _voucher_target(customer_id=customer_id, token=token)
    ttl = settings.CART_TTL_SECONDS if customer_id is not None else settings.GUEST_CART_TTL_SECONDS
    storage.set_voucher(cart=cart_key, live=live, generation=hot_cache.ensure_generation(), code=None, ttl=ttl)


def _voucher_target(*, customer_id: int | None, token: str | None) -> tuple[str, str | None, ratelimit.Window]:
    """(the cart's key, its liveness key for a guest, the attempts' window)."""
    if customer_id is not None:
        return storage.cart_key(customer_id), None, ratelimit.shopper_window("voucher", customer_id)
    digest = _guest_digest(token)
    cart_key, live = storage.guest_cart_keys(digest)
    return cart_key, live, ratelimit.window("voucher", f"guest:{digest}", bucket=storage.guest_bucket(digest))


def set_shipping_method(
    *, code: str, country: str | None = None, customer_id: int | None = None, token: str | None = None
) -> PricedCart:
    """Choose the shipping method `code` for the shopper's cart (`customer_id`) or
    a guest's (`token`), to `country` (default: the shopper's saved address's,
    else SHOP_TAX_COUNTRY), kept with the cart; the cart priced with it.
    ShippingMethodUnknown (no active method has the code), ShippingMethodUnavailable
    (it does not ship there): 422s, and the cart keeps what it had."""
    if country is None and customer_id is not None:
        country = (default_address(customer_id=customer_id) or {}).get("country")
    country = country or settings.SHOP_TAX_COUNTRY
    method = cached_charges().method(code)
    if method is None:
        raise ShippingMethodUnknown(code=code)
    if not method.ships_to(country):
        raise ShippingMethodUnavailable(code=code, country=country)
    cart_key, live = _cart_target(customer_id=customer_id, token=token)
    cart = storage.set_shipping(
        cart=cart_key,
        live=live,
        generation=hot_cache.ensure_generation(),
        value=storage.shipping_value(code, country),
        ttl=_ttl(customer_id),
    )
    return _price(cart, *catalog_for(list(cart.lines)))


def remove_shipping_method(*, customer_id: int | None = None, token: str | None = None) -> None:
    cart_key, live = _cart_target(customer_id=customer_id, token=token)
    storage.set_shipping(
        cart=cart_key, live=live, generation=hot_cache.ensure_generation(), value=None, ttl=_ttl(customer_id)
    )


@dataclass(frozen=True)
class ShippingQuote:
    code: str
    name: str
    min_days: int
    max_days: int
    price: int | None  # for the cart (after its shipping discounts, catalog terms); None: no cart, or unavailable
    available: bool  # it can carry the cart (always, without one)


def shipping_quotes(*, country: str, customer_id: int | None = None, token: str | None = None) -> list[ShippingQuote]:
    """The active methods that ship to `country`; with a cart (a shopper's, or a
    guest's token), each priced for it as checkout would charge it."""
    if customer_id is None and token is None:
        hot_cache.check_generation()  # no cart script checks it for this process's cache: a method changed elsewhere
        methods = cached_charges().methods_to(country)
        return [ShippingQuote(m.code, m.name, m.min_days, m.max_days, None, True) for m in methods]
    methods = cached_charges().methods_to(country)
    if customer_id is not None:
        stored = storage.read_cart(customer_id=customer_id, generation=hot_cache.ensure_generation())
    else:
        stored = storage.guest_read_cart(digest=_guest_digest(token), generation=hot_cache.ensure_generation())
    products, available = catalog_for(list(stored.lines))
    quotes = []
    for method in methods:
        cart = _price(StoredCart(stored.lines, stored.voucher, (method.code, country)), products, available)
        charge = cart.shipping
        carried = charge is not None or not cart.needs_shipping
        price = (charge["price"] - charge["discount"]) if charge else (0 if carried else None)
        quotes.append(ShippingQuote(method.code, method.name, method.min_days, method.max_days, price, carried))
    return quotes


def _cart_target(*, customer_id: int | None, token: str | None) -> tuple[str, str | None]:
    """(the cart's key, its liveness key for a guest's; None for a shopper's)."""
    if customer_id is not None:
        return storage.cart_key(customer_id), None
    return storage.guest_cart_keys(_guest_digest(token))


def _ttl(customer_id: int | None) -> int:
    return settings.CART_TTL_SECONDS if customer_id is not None else settings.GUEST_CART_TTL_SECONDS
