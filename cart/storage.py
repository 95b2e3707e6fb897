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
from core.exceptions import RateLimited
from core.hotcache import GENERATION_KEY, StaleCache
from core.ratelimit import parse_rate
from core.redis_scripts import run_script

logger = logging.getLogger(__name__)

STALE, FULL, LIMITED = -1, -2, -3

# Lua functions every cart script starts with (checkout's admission script too).
# limited(): the ms left in the window once the shopper is over the limit, else
# nil (limit 0: none).
PRELUDE = """
local function stale(generation_key, generation)
  return (redis.call('GET', generation_key) or '0') ~= generation
end
local function limited(window_key, limit, window_ms)
  if tonumber(limit) <= 0 then return nil end
  local count = redis.call('INCR', window_key)
  if count == 1 then redis.call('PEXPIRE', window_key, window_ms) end
  if count > tonumber(limit) then return redis.call('PTTL', window_key) end
  return nil
end
"""

# KEYS: cart, generation, rate-limit window. ARGV: generation, sku, quantity (0
# removes), ttl, max lines, rate limit (0: none), window in ms.
# Returns {status, cart as a flat field/value list (or ms to wait when limited)}.
# The shopper's write rate limit is counted here too: one round-trip in all.
_WRITE = PRELUDE + """
if stale(KEYS[2], ARGV[1]) then return {-1, {}} end
local wait = limited(KEYS[3], ARGV[6], ARGV[7])
if wait then return {-3, wait} end
local quantity = tonumber(ARGV[3])
if quantity == 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0
     and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
    return {-2, {}}
  end
  redis.call('HSET', KEYS[1], ARGV[2], quantity)
end
if redis.call('EXPIRE', KEYS[1], ARGV[4]) == 0 then return {0, {}} end
return {0, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: cart, generation, rate-limit window. ARGV: generation, rate limit (0: none), window in ms.
_READ = PRELUDE + """
if stale(KEYS[2], ARGV[1]) then return {-1, {}} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then return {-3, wait} end
return {0, redis.call('HGETALL', KEYS[1])}
"""


# KEYS: rate-limit window. ARGV: rate limit, window in ms. Returns ms to wait, 0 when allowed.
_COUNT = PRELUDE + """
return limited(KEYS[1], ARGV[1], ARGV[2]) or 0
"""


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


def rate_window(scope: str | None, customer_id: int) -> tuple[str, int, int]:
    """(window key, limit, window ms) of a shopper's rate limit; limit 0 when none applies."""
    rate = settings.RATE_LIMITS.get(scope) if scope else None
    limit, period = parse_rate(rate) if rate else (0, 1)
    return f"rate:{scope}:user:{customer_id}", limit, period * 1000


def count_write(*, customer_id: int) -> None:
    """Count one cart write against the shopper's limit on its own (RateLimited when
    over), for a write that must be counted before it reaches the database."""
    rate_key, limit, window = rate_window("cart_write", customer_id)
    if not limit:
        return
    try:
        wait = run_script(_COUNT, keys=[rate_key], args=[limit, window])
    except RedisError as exc:
        raise unavailable(exc) from exc
    if wait:
        check_status(LIMITED, wait)


def write_line(
    *, customer_id: int, sku: str, quantity: int, generation: str, counted: bool = False
) -> dict[str, int]:
    """Set (or with 0, remove) one line; refresh the TTL; return the whole cart.
    The write is counted against the shopper's limit in the same call unless `counted`."""
    rate_key, limit, window = rate_window(None if counted else "cart_write", customer_id)
    return _run(
        _WRITE,
        [cart_key(customer_id), GENERATION_KEY, rate_key],
        [generation, sku, quantity, settings.CART_TTL_SECONDS, settings.CART_MAX_LINES, limit, window],
    )


def read_lines(*, customer_id: int, generation: str, rate_scope: str | None = None) -> dict[str, int]:
    """The cart; with `rate_scope`, the shopper's rate limit for it is counted in the same call."""
    rate_key, limit, window = rate_window(rate_scope, customer_id)
    return _run(_READ, [cart_key(customer_id), GENERATION_KEY, rate_key], [generation, limit, window])


def delete_cart(*, customer_id: int) -> None:
    _connection().delete(cart_key(customer_id))
