"""The cart in Redis: hash `cart:{customer_id}`, field = SKU, value = quantity,
and the code of the voucher the shopper entered under the field `@voucher`,
the shipping method and country chosen under `@shipping` (a SKU never
contains '@'), so that they are taken, given back, merged and expired with
the lines.

A guest's cart is the same hash under `cart:guest:{digest}`, alive while its
token's key `cart:guest:{digest}:live` exists (digest: sha256 of the token, so
Redis never holds a working token). Merging it into a shopper's cart deletes
both: a used token is dead.

Each API call is one Lua script, so one round-trip (entering a voucher code:
two, around the code's look-up), and each script first checks the hot-cache
generation (core/hotcache.py) before touching the cart.
"""

import logging
import math
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import RedisError

from cart.exceptions import CartFull, CartTokenUnknown, CartUnavailable
from core import ratelimit
from core.exceptions import RateLimited
from core.hotcache import StaleCache, generation_key_beside
from core.redis_scripts import GENERATION_LUA, compose, load_lua, lua_constants, run_script
from core.sharding import CARTS, clustered, customer_bucket, customer_redis, tagged, text_bucket

logger = logging.getLogger(__name__)

# What a cart script answers instead of 0 (done); the scripts get the same names (lua_constants).
STALE, FULL, LIMITED, NO_GUEST_CART = -1, -2, -3, -4
VOUCHER_FIELD = "@voucher"
SHIPPING_FIELD = "@shipping"  # "{method code} {country}"
_STATUSES = lua_constants(
    STALE=STALE,
    FULL=FULL,
    LIMITED=LIMITED,
    NO_GUEST_CART=NO_GUEST_CART,
    VOUCHER_FIELD=VOUCHER_FIELD,
    SHIPPING_FIELD=SHIPPING_FIELD,
)

# The cart's scripts (cart/lua/): each starts with the functions it calls. LUA
# holds the statuses and the cart's public functions, for scripts composed elsewhere (checkout).
LUA = compose(_STATUSES, load_lua("cart", "cart"))
_WRITE = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "write"))
_READ = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "read"))
_GUEST_WRITE = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "guest_write"))
_GUEST_READ = compose(GENERATION_LUA, LUA, load_lua("cart", "guest_read"))
_MERGE = compose(LUA, load_lua("cart", "merge"))
_GUEST_LINES = compose(_STATUSES, load_lua("cart", "guest_lines"))
_MERGE_LINES = compose(LUA, load_lua("cart", "merge_lines"))
_VOUCHER = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "voucher"))
_TAKE = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "take"))
_GIVE_BACK = compose(LUA, load_lua("cart", "give_back"))


def cart_key(customer_id: int) -> str:
    return tagged("cart", customer_bucket(customer_id), str(customer_id))


def taken_key(customer_id: int) -> str:
    """Where a checkout sets the shopper's cart aside (cart.lua, take_cart)."""
    return tagged("cart", customer_bucket(customer_id), f"{customer_id}:taken")


def guest_cart_keys(digest: str) -> tuple[str, str]:
    """(the guest cart's hash, its token's liveness key)."""
    bucket = text_bucket(digest)
    return tagged("cart:guest", bucket, digest), tagged("cart:guest", bucket, f"{digest}:live")


def guest_bucket(digest: str) -> int:
    """The bucket of a guest cart's keys, for the token's own counters (core/sharding.py)."""
    return text_bucket(digest)


@dataclass(frozen=True)
class StoredCart:
    lines: dict[str, int]
    voucher: str | None = None  # the code the shopper entered
    shipping: tuple[str, str] | None = None  # the method the shopper chose, and the country to ship to


def shipping_value(code: str, country: str) -> str:
    return f"{code} {country}"


_VOUCHER_FIELD, _SHIPPING_FIELD = VOUCHER_FIELD.encode(), SHIPPING_FIELD.encode()


def as_cart(flat: list[bytes]) -> StoredCart:
    """A cart script's flat {field, value, ...} list."""
    lines, voucher, shipping = {}, None, None
    for i in range(0, len(flat), 2):
        if flat[i] == _VOUCHER_FIELD:
            voucher = flat[i + 1].decode()
        elif flat[i] == _SHIPPING_FIELD:
            code, _, country = flat[i + 1].decode().partition(" ")
            shipping = (code, country)
        else:
            lines[flat[i].decode()] = int(flat[i + 1])
    return StoredCart(lines, voucher, shipping)


def check_status(status: int, payload) -> None:
    """Raise for what a cart script refused (its status and payload)."""
    if status == STALE:
        raise StaleCache()
    if status == FULL:
        raise CartFull(max_lines=settings.CART_MAX_LINES)
    if status == LIMITED:
        raise RateLimited(retry_after=max(1, math.ceil(payload / 1000)))
    if status == NO_GUEST_CART:
        raise CartTokenUnknown()


def unavailable(exc: RedisError) -> CartUnavailable:
    logger.warning("cart store unavailable: %r", exc)
    return CartUnavailable()


def _run(script: str, keys: list, args: list) -> StoredCart:
    try:
        status, flat = run_script(script, keys=keys, args=args, alias=CARTS)
    except RedisError as exc:
        raise unavailable(exc) from exc
    check_status(status, flat)
    return as_cart(flat)


def count_write(*, customer_id: int | None = None, address: str | None = None) -> None:
    """Count one cart write against the shopper's limit (or a guest's address's) on
    its own (RateLimited when over), for a write that must be counted before it
    reaches the database."""
    if customer_id is not None:
        limit = ratelimit.shopper_window("cart_write", customer_id)
    else:
        limit = ratelimit.window("guest_cart_address", address)
    _count(limit)


def _count(limit: ratelimit.Window) -> None:
    try:
        wait = ratelimit.count(limit)
    except RedisError as exc:
        raise unavailable(exc) from exc
    if wait:
        check_status(LIMITED, wait * 1000)


def _beside(cart: str, limit: ratelimit.Window) -> ratelimit.Window:
    """A client address's window for a script on `cart`'s keys. On a cluster the
    address's counter lies in another slot: it is counted first, in a call of its
    own, and the script gets a window that counts nothing, on a key of its slot."""
    if not clustered():
        return limit
    if limit.limit:
        _count(limit)
    return ratelimit.Window(cart, 0, limit.ms)


def write_line(*, customer_id: int, sku: str, quantity: int, generation: str, counted: bool = False) -> StoredCart:
    """Set (or with 0, remove) one line; refresh the TTL; return the whole cart.
    The write is counted against the shopper's limit in the same call unless `counted`."""
    cart = cart_key(customer_id)
    limit = ratelimit.shopper_window(None if counted else "cart_write", customer_id)
    return _run(
        _WRITE,
        [cart, generation_key_beside(cart), limit.key],
        [generation, sku, quantity, settings.CART_TTL_SECONDS, settings.CART_MAX_LINES, limit.limit, limit.ms],
    )


def read_cart(*, customer_id: int, generation: str, rate_scope: str | None = None) -> StoredCart:
    """The cart; with `rate_scope`, the shopper's rate limit for it is counted in the same call."""
    cart = cart_key(customer_id)
    limit = ratelimit.shopper_window(rate_scope, customer_id)
    return _run(_READ, [cart, generation_key_beside(cart), limit.key], [generation, limit.limit, limit.ms])


def take_cart(
    *, customer_id: int, idempotency_key: str, generation: str, rate_scope: str | None = None
) -> tuple[StoredCart, bool]:
    """The cart a checkout under `idempotency_key` orders, taken (cart.lua,
    take_cart), and whether it was taken now (False: empty, or what an earlier
    attempt under the key took). For a gate on a Redis of its own: by default
    orders/lua/admission.lua does this in the gate's call."""
    cart = cart_key(customer_id)
    limit = ratelimit.shopper_window(rate_scope, customer_id)
    keys = [cart, generation_key_beside(cart), limit.key, taken_key(customer_id)]
    args = [generation, limit.limit, limit.ms, idempotency_key, settings.TAKEN_CART_TTL_SECONDS]
    try:
        status, flat, taken = run_script(_TAKE, keys=keys, args=args, alias=CARTS)
    except RedisError as exc:
        raise unavailable(exc) from exc
    check_status(status, flat)
    return as_cart(flat), bool(taken)


def give_back(carts: list[tuple[int, str]], *, drop_voucher: bool = False) -> int:
    """The carts that checkouts took, back to their shoppers (customer id,
    checkout key), for checkouts that wrote no order; lines set since win.
    With `drop_voucher`, without their voucher (it has no use left). One call
    (on a cluster, one per bucket); returns how many were given back. Raises RedisError."""
    by_bucket: dict[int, list[tuple[int, str]]] = {}
    for cart in carts:
        by_bucket.setdefault(customer_bucket(cart[0]) if clustered() else 0, []).append(cart)
    given = 0
    for group in by_bucket.values():
        keys = [key for customer_id, _ in group for key in (cart_key(customer_id), taken_key(customer_id))]
        args = [settings.CART_TTL_SECONDS, "1" if drop_voucher else "0", *[checkout for _, checkout in group]]
        given += run_script(_GIVE_BACK, keys=keys, args=args, alias=CARTS)
    return given


def guest_write_line(
    *, digest: str, sku: str, quantity: int, generation: str, address: str, create: bool, counted: bool = False
) -> StoredCart:
    """write_line for a guest cart (CartTokenUnknown when the token has no live
    cart); `create` starts one under a new token. Counted against the token's and
    the client address's limits in the same call (the address's unless `counted`)."""
    cart, live = guest_cart_keys(digest)
    per_token = ratelimit.window("guest_cart_write", digest, bucket=guest_bucket(digest))
    per_address = _beside(cart, ratelimit.window(None if counted else "guest_cart_address", address))
    new_carts = _beside(cart, ratelimit.window("guest_cart_new" if create else None, address))
    ttl = settings.GUEST_CART_TTL_SECONDS
    return _run(
        _GUEST_WRITE,
        [cart, live, generation_key_beside(cart), per_token.key, per_address.key, new_carts.key],
        [
            generation,
            sku,
            quantity,
            ttl,
            settings.CART_MAX_LINES,
            per_token.limit,
            per_token.ms,
            per_address.limit,
            per_address.ms,
            "1" if create else "0",
            new_carts.limit,
            new_carts.ms,
            min(settings.GUEST_CART_NEW_TTL_SECONDS, ttl),
        ],
    )


def guest_read_cart(*, digest: str, generation: str) -> StoredCart:
    cart, live = guest_cart_keys(digest)
    return _run(_GUEST_READ, [cart, live, generation_key_beside(cart)], [generation])


def voucher_attempt(
    *, cart: str, live: str | None, generation: str, per_shopper: ratelimit.Window, per_address: ratelimit.Window
) -> StoredCart:
    """One attempt at entering a voucher code counted against both windows (the
    shopper's or guest token's, and the client address's): RateLimited when over
    either; else the cart (`live`: a guest cart's liveness key, None for a
    shopper's). Made before the code is looked up, so guesses are limited."""
    per_address = _beside(cart, per_address)
    return _run(
        _VOUCHER,
        [cart, generation_key_beside(cart), live or cart, per_shopper.key, per_address.key],
        [generation, "check", "", 0, per_shopper.limit, per_shopper.ms, per_address.limit, per_address.ms],
    )


def set_voucher(*, cart: str, live: str | None, generation: str, code: str | None, ttl: int) -> StoredCart:
    """The cart's voucher set to `code` (None removes it), its TTL refreshed."""
    return _run(_VOUCHER, [cart, generation_key_beside(cart), live or cart], [generation, "set", code or "", ttl])


def set_shipping(*, cart: str, live: str | None, generation: str, value: str | None, ttl: int) -> StoredCart:
    """The cart's shipping method and country (shipping_value; None removes them), its TTL refreshed."""
    return _run(_VOUCHER, [cart, generation_key_beside(cart), live or cart], [generation, "shipping", value or "", ttl])


def merge_guest_cart(*, digest: str, customer_id: int) -> int:
    """The guest cart's lines into the shopper's cart, atomically (cart/lua/merge.lua);
    the lines merged. CartTokenUnknown when the token has no live cart.

    On a cluster the two carts may lie on two shards: the guest cart is read,
    merged into the shopper's (merge_lines, which a second time changes
    nothing), then its token killed. Two merges at once both merge the same
    lines; a merge cut short keeps the guest cart alive for another try."""
    cart, live = guest_cart_keys(digest)
    limits = [settings.CART_MAX_QUANTITY, settings.CART_MAX_LINES, settings.CART_TTL_SECONDS]
    try:
        if clustered():
            return _merge_across_shards(cart, live, cart_key(customer_id), limits)
        merged = run_script(_MERGE, keys=[cart, live, cart_key(customer_id)], args=limits, alias=CARTS)
    except RedisError as exc:
        raise unavailable(exc) from exc
    if merged == NO_GUEST_CART:
        raise CartTokenUnknown()
    return merged


def _merge_across_shards(cart: str, live: str, shoppers: str, limits: list) -> int:
    lines = run_script(_GUEST_LINES, keys=[cart, live], args=[], alias=CARTS)
    if lines == NO_GUEST_CART:
        raise CartTokenUnknown()
    merged = run_script(_MERGE_LINES, keys=[shoppers], args=[*limits, *lines], alias=CARTS)
    customer_redis().delete(live, cart)
    return merged
