"""The cart in Redis: hash `cart:{customer_id}`, field = SKU, value = quantity.

Each API call is one Lua script, so one round-trip, and each script first
checks the hot-cache generation (core/hotcache.py) before touching the cart.
"""

import logging
import math

from django.conf import settings
from django_redis import get_redis_connection
from redis.exceptions import RedisError

from cart.exceptions import CartFull, CartUnavailable
from core import ratelimit
from core.exceptions import RateLimited
from core.hotcache import GENERATION_KEY, StaleCache
from core.redis_scripts import GENERATION_LUA, compose, load_lua, run_script

logger = logging.getLogger(__name__)

STALE, FULL, LIMITED = -1, -2, -3

# The cart's scripts (cart/lua/): each starts with the functions it calls. LUA
# holds the cart's public functions, for scripts composed elsewhere (checkout).
LUA = load_lua("cart", "cart")
_WRITE = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "write"))
_READ = compose(GENERATION_LUA, ratelimit.LUA, LUA, load_lua("cart", "read"))


def cart_key(customer_id: int) -> str:
    return f"cart:{customer_id}"


def _connection():
    return get_redis_connection("default")


def as_lines(flat: list[bytes]) -> dict[str, int]:
    return {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def check_status(status: int, payload) -> None:
    """Raise for what a cart script refused (its status and payload)."""
    if status == STALE:
        raise StaleCache()
    if status == FULL:
        raise CartFull(max_lines=settings.CART_MAX_LINES)
    if status == LIMITED:
        raise RateLimited(retry_after=max(1, math.ceil(payload / 1000)))


def unavailable(exc: RedisError) -> CartUnavailable:
    logger.warning("cart store unavailable: %r", exc)
    return CartUnavailable()


def _run(script: str, keys: list, args: list) -> dict[str, int]:
    try:
        status, flat = run_script(script, keys=keys, args=args)
    except RedisError as exc:
        raise unavailable(exc) from exc
    check_status(status, flat)
    return as_lines(flat)


def count_write(*, customer_id: int) -> None:
    """Count one cart write against the shopper's limit on its own (RateLimited when
    over), for a write that must be counted before it reaches the database."""
    try:
        wait = ratelimit.count(ratelimit.shopper_window("cart_write", customer_id))
    except RedisError as exc:
        raise unavailable(exc) from exc
    if wait:
        check_status(LIMITED, wait * 1000)


def write_line(
    *, customer_id: int, sku: str, quantity: int, generation: str, counted: bool = False
) -> dict[str, int]:
    """Set (or with 0, remove) one line; refresh the TTL; return the whole cart.
    The write is counted against the shopper's limit in the same call unless `counted`."""
    limit = ratelimit.shopper_window(None if counted else "cart_write", customer_id)
    return _run(
        _WRITE,
        [cart_key(customer_id), GENERATION_KEY, limit.key],
        [generation, sku, quantity, settings.CART_TTL_SECONDS, settings.CART_MAX_LINES, limit.limit, limit.ms],
    )


def read_lines(*, customer_id: int, generation: str, rate_scope: str | None = None) -> dict[str, int]:
    """The cart; with `rate_scope`, the shopper's rate limit for it is counted in the same call."""
    limit = ratelimit.shopper_window(rate_scope, customer_id)
    return _run(_READ, [cart_key(customer_id), GENERATION_KEY, limit.key], [generation, limit.limit, limit.ms])


def delete_carts(*, customer_ids: list[int]) -> None:
    if customer_ids:
        _connection().delete(*[cart_key(customer_id) for customer_id in customer_ids])
