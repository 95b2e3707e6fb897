"""Checkout's first step: read the cart, count the shopper's checkout rate
limit and pass the flash-sale gate. When the gate lives on the cart's Redis
(the default), that is one Lua script, so one round-trip: a flash-sale
refusal costs a single Redis call and no SQL. With the gate on a Redis of its
own, the cart is read first and the gate called after.
"""

from dataclasses import dataclass

from django_redis import get_redis_connection
from redis.exceptions import RedisError

from cart import storage
from core import ratelimit
from core.hotcache import GENERATION_KEY, hot_cache
from core.redis_scripts import GENERATION_LUA, compose, load_lua, run_script
from inventory import gate
from inventory.services.flash_sales import gated_skus
from shop.services import address_key


@dataclass(frozen=True)
class Admission:
    lines: dict[str, int]  # the cart
    gated: dict[str, int]  # its flash-sale lines
    admitted: bool  # gate units were taken: give them back if the checkout fails
    saved_address: bytes | None = None  # what Redis holds under shop's address_key (None: nothing)


_ADMISSION = compose(GENERATION_LUA, ratelimit.LUA, storage.LUA, gate.LUA, load_lua("orders", "admission"))


def _cached_address(customer_id: int) -> bytes | None:
    try:
        return get_redis_connection("default").get(address_key(customer_id))
    except RedisError:  # the database answers instead
        return None


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
        return Admission(lines, gated, admitted, _cached_address(customer_id))

    limit = ratelimit.shopper_window(scope, customer_id)
    keys = [
        storage.cart_key(customer_id),
        GENERATION_KEY,
        limit.key,
        gate.replay_key(customer_id, idempotency_key),
        gate.REFUSALS_KEY,
        address_key(customer_id),
    ]
    args: list = [generation, limit.limit, limit.ms, customer_id]
    for sku, per_customer in limits.items():
        keys += [gate.remaining_key(sku), gate.bought_key(sku)]
        args += [sku, per_customer]
    try:
        status, flat, verdict, sku, *rest = run_script(_ADMISSION, keys=keys, args=args)
    except RedisError as exc:
        raise storage.unavailable(exc) from exc
    storage.check_status(status, flat)
    lines = storage.as_lines(flat)
    gated = {sku: quantity for sku, quantity in lines.items() if sku in limits}
    admitted = bool(gated) and gate.judge(verdict, sku, limits)
    return Admission(lines, gated, admitted, rest[0] if rest else None)
