import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from cart import storage
from cart.exceptions import CartTokenUnknown, InactiveProduct, UnknownProduct
from cart.storage import StoredCart
from core import ratelimit
from core.hotcache import CachedProduct, hot_cache
from inventory.stock_hints import fresh_available_hints, remember_available
from shop.exceptions import VoucherRefused
from shop.models import Product
from shop.pricing import PromotionRule, price_lines
from shop.promotions import check_voucher, find_voucher
from shop.selectors import active_promotions, cached_products, cached_voucher


@dataclass(frozen=True)
class CartLine:
    sku: str
    name: str
    quantity: int
    unit_price: int  # the catalog's
    discount: int  # minor units off the whole line (its promotions)
    line_total: int  # quantity x unit_price - discount
    in_stock: bool


@dataclass(frozen=True)
class PricedCart:
    items: list[CartLine]
    currency: str
    warnings: list[dict] = field(default_factory=list)
    subtotal: int = 0  # at catalog prices
    discounts: list[dict] = field(default_factory=list)  # shop.pricing.PricedCart.discounts()
    total: int = 0  # subtotal - the discounts' amounts, and the sum of the lines' totals
    voucher: dict | None = None  # {"code", "error"}: the code the cart holds, and why checkout would refuse it


def _price(cart: StoredCart, products: Mapping[str, CachedProduct | None], available: Mapping[str, int]) -> PricedCart:
    """The cart as checkout would charge it now: shop.pricing.price_lines over the
    active products, with the automatic promotions and the cart's voucher (from
    the hot cache: no query once warm). Unknown and inactive SKUs are warnings
    and take no part; a voucher checkout would refuse takes no part either, and
    says why (its uses are counted at checkout: a used-up voucher shows there)."""
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
    currency = settings.SHOP_CURRENCY
    now = timezone.now()
    voucher, voucher_json = _cart_voucher(cart.voucher, now=now, lines=priced, products=products)
    if not priced:  # nothing to price: no promotions to read
        return PricedCart(items=[], currency=currency, warnings=warnings, voucher=voucher_json)
    result = price_lines(priced, products=products, promotions=active_promotions(now=now), voucher=voucher, now=now)
    items = [
        CartLine(
            sku=line.sku,
            name=products[line.sku].name,
            quantity=line.quantity,
            unit_price=line.unit_price,
            discount=line.discount,
            line_total=line.total,
            in_stock=available.get(line.sku, 0) >= line.quantity,
        )
        for line in result.lines
    ]
    return PricedCart(
        items=items,
        currency=currency,
        warnings=warnings,
        subtotal=result.subtotal,
        discounts=result.discounts(),
        total=result.total,
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
        rows = Product.objects.filter(sku__in=missing).values_list(
            "sku", "name", "price", "is_active", "stock__available"
        )
        read = {}
        for sku, name, price, is_active, stock in rows:
            products[sku] = CachedProduct(sku=sku, name=name, price=price, is_active=is_active)
            read[sku] = stock or 0
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
    cart = storage.write_line(
        customer_id=customer_id,
        sku=sku,
        quantity=quantity,
        generation=hot_cache.ensure_generation(),
        counted=counted,
    )
    return _price(cart, *catalog_for(list(cart.lines)))


def _check_writable(*, sku: str, quantity: int, count) -> bool:
    """UnknownProduct or InactiveProduct for a line that cannot be written;
    returns whether the write was counted here (`count()`). A SKU this process
    does not know as a product costs a query (and a cache entry): the write is
    counted against the writer's limit before, not after, so that made-up SKUs
    cannot be sent without limit. A known product's write is counted by the
    write script itself (one round-trip)."""
    counted = hot_cache.products.get(sku) is None
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
    return storage.merge_guest_cart(digest=_guest_digest(token), customer_id=customer_id)


def remove_cart_item(*, customer_id: int, sku: str) -> None:
    storage.write_line(customer_id=customer_id, sku=sku, quantity=0, generation=hot_cache.ensure_generation())


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
        per_address=ratelimit.window("voucher_address", address),
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
    return cart_key, live, ratelimit.window("voucher", f"guest:{digest}")
