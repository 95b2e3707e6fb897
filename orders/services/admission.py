"""Checkout's first step: read the cart, count the shopper's checkout rate
limit and pass the flash-sale gate. When the gate lives on the cart's Redis
(the default), that is one Lua script, so one round-trip: a flash-sale
refusal costs a single Redis call and no SQL. With the gate on a Redis of its
own, the cart is read first and the gate called after.
"""

from dataclasses import dataclass

from redis.exceptions import RedisError

from cart import storage
from core.hotcache import GENERATION_KEY, hot_cache
from core.redis_scripts import run_script
from inventory import gate
from inventory.services.flash_sales import gated_skus


@dataclass(frozen=True)
class Admission:
    lines: dict[str, int]  # the cart
    gated: dict[str, int]  # its flash-sale lines
    admitted: bool  # gate units were taken: give them back if the checkout fails


# KEYS: cart, generation, rate-limit window, replay marker, refusals, then
# (remaining, bought) per gated SKU. ARGV: generation, rate limit (0: none),
# window ms, customer, then (sku, per-customer limit) per gated SKU.
# Returns {status, cart (or ms to wait when limited), verdict, sku}.
_ADMISSION = storage.PRELUDE + gate.ADMIT_FUNCTION + """
if stale(KEYS[2], ARGV[1]) then return {-1, {}, '', ''} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then return {-3, wait, '', ''} end
local cart = redis.call('HGETALL', KEYS[1])
local lines = {}
for i = 1, (#ARGV - 4) / 2 do
  local sku = ARGV[3 + 2*i]
  local quantity = redis.call('HGET', KEYS[1], sku)
  if quantity then
    lines[#lines + 1] = {sku, tonumber(quantity), tonumber(ARGV[4 + 2*i]), KEYS[4 + 2*i], KEYS[5 + 2*i]}
  end
end
if #lines == 0 then return {0, cart, 'none', ''} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {0, cart, 'replay', ''} end
local verdict, sku = admit(ARGV[4], lines, KEYS[5])
return {0, cart, verdict, sku}
"""


def admit_cart(*, customer_id: int, idempotency_key: str, rate_limited: bool) -> Admission:
    """Raises RateLimited, SoldOut, LimitReached, GateUnavailable, CartUnavailable
    or StaleCache; an empty cart is admitted with no lines."""
    generation = hot_cache.ensure_generation()
    scope = "checkout" if rate_limited else None
    limits = gated_skus()
    if not gate.shares_cart_redis():
        lines = storage.read_lines(customer_id=customer_id, generation=generation, rate_scope=scope)
        gated = {sku: quantity for sku, quantity in lines.items() if sku in limits}
        admitted = bool(gated) and gate.admit(
            customer_id=customer_id, idempotency_key=idempotency_key, lines=gated, limits=limits
        )
        return Admission(lines, gated, admitted)

    rate_key, rate_limit, window = storage.rate_window(scope, customer_id)
    keys = [
        storage.cart_key(customer_id),
        GENERATION_KEY,
        rate_key,
        gate.replay_key(customer_id, idempotency_key),
        gate.REFUSALS_KEY,
    ]
    args: list = [generation, rate_limit, window, customer_id]
    for sku, limit in limits.items():
        keys += [gate.remaining_key(sku), gate.bought_key(sku)]
        args += [sku, limit]
    try:
        status, flat, verdict, sku = run_script(_ADMISSION, keys=keys, args=args)
    except RedisError as exc:
        raise storage.unavailable(exc) from exc
    storage.check_status(status, flat)
    lines = storage.as_lines(flat)
    gated = {sku: quantity for sku, quantity in lines.items() if sku in limits}
    admitted = bool(gated) and gate.judge(verdict, sku, limits)
    return Admission(lines, gated, admitted)
