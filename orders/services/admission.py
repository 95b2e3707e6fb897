"""Checkout's first step: read the cart, count the shopper's checkout rate
limit and pass the flash-sale gate. When the gate lives on the cart's Redis
(the default), that is one Lua script, so one round-trip: a flash-sale
refusal costs a single Redis call and no SQL. With the gate on a Redis of its
own, the cart is read first and the gate called after.

While a sale is sold out, `early_refusal` gives the same refusals for the
cost of one Lua call before anything else of the request is done
(orders/early_refusal.py). `hot_cache.sold_out` holds the gated SKUs this
process last heard the gate call sold out (either script reports them), so
that nobody pays for that call while no sale is sold out.
"""

import logging
import math
from dataclasses import dataclass

from django.conf import settings
from django_redis import get_redis_connection
from redis.exceptions import RedisError

from cart import storage
from core import ratelimit
from core.exceptions import DomainError, RateLimited
from core.hotcache import GENERATION_KEY, hot_cache
from core.redis_scripts import GENERATION_LUA, compose, load_lua, run_script
from inventory import gate
from inventory.services.flash_sales import gate_rules, gate_rules_in_memory, queued_skus
from orders.metrics import CHECKOUT_REFUSALS
from orders.queue_producer import queue_producer
from shop.services import address_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    lines: dict[str, int]  # the cart
    voucher: str | None  # the code the cart holds
    gated: dict[str, int]  # its flash-sale lines
    admitted: bool  # gate units were taken: give them back if the checkout fails
    saved_address: bytes | None = None  # what Redis holds under shop's address_key (None: nothing)
    took_cart: bool = False  # the cart was taken now: give it back if the checkout writes no order
    shipping_code: str | None = None  # the shipping method the cart holds


_ADMISSION = compose(GENERATION_LUA, ratelimit.LUA, storage.LUA, gate.LUA, load_lua("orders", "admission"))
_REFUSAL = compose(GENERATION_LUA, ratelimit.LUA, storage.LUA, gate.LUA, load_lua("orders", "refusal"))


def _cached_address(customer_id: int) -> bytes | None:
    try:
        return get_redis_connection("default").get(address_key(customer_id))
    except RedisError:  # the database answers instead
        return None


def admit_cart(*, customer_id: int, idempotency_key: str, rate_limited: bool) -> Admission:
    """Raises RateLimited, SoldOut, LimitReached, GateUnavailable, CartUnavailable
    or StaleCache; an empty cart is admitted with no lines. An admitted cart is
    taken (cart/lua/cart.lua, take_cart): the order's commit needs no call to
    clear it, and a failed checkout gives it back (orders/services/checkout.py).
    A retry under the same key after an answer that never came orders what the
    first attempt took."""
    generation = hot_cache.ensure_generation()
    scope = "checkout" if rate_limited else None
    rules = gate_rules()
    if not gate.shares_cart_redis():
        cart, took = storage.take_cart(
            customer_id=customer_id, idempotency_key=idempotency_key, generation=generation, rate_scope=scope
        )
        lines = cart.lines
        gated = {sku: quantity for sku, quantity in lines.items() if sku in rules}
        try:
            admitted = bool(gated) and gate.admit(
                customer_id=customer_id, idempotency_key=idempotency_key, lines=gated, rules=rules
            )
        except BaseException:
            if took:
                give_back_cart(customer_id, idempotency_key)
            raise
        return Admission(lines, cart.voucher, gated, admitted, _cached_address(customer_id), took, _code(cart))

    limit = ratelimit.shopper_window(scope, customer_id)
    keys = [
        storage.cart_key(customer_id),
        GENERATION_KEY,
        limit.key,
        gate.replay_key(customer_id, idempotency_key),
        gate.REFUSALS_KEY,
        address_key(customer_id),
        storage.taken_key(customer_id),
    ]
    args: list = [generation, limit.limit, limit.ms, customer_id, idempotency_key, settings.TAKEN_CART_TTL_SECONDS]
    for sku, rule in rules.items():
        keys += [gate.remaining_key(sku), gate.bought_key(sku)]
        args += [sku, rule.limit, rule.opens_ms, rule.closes_ms]
    try:
        status, flat, verdict, sku, *rest = run_script(_ADMISSION, keys=keys, args=args)
    except RedisError as exc:
        raise storage.unavailable(exc) from exc
    storage.check_status(status, flat)
    cart = storage.as_cart(flat)
    lines = cart.lines
    gated = {sku: quantity for sku, quantity in lines.items() if sku in rules}
    if verdict == b"sold_out":
        hot_cache.sold_out = hot_cache.sold_out | {sku.decode()}
    admitted = bool(gated) and gate.judge(verdict, sku, rules)
    return Admission(lines, cart.voucher, gated, admitted, rest[0], bool(rest[1]), _code(cart))


def _code(cart: storage.StoredCart) -> str | None:
    return cart.shipping[0] if cart.shipping else None


def give_back_cart(customer_id: int, idempotency_key: str, *, drop_voucher: bool = False) -> None:
    """Best effort: the cart this checkout took, back to the shopper (it wrote
    no order), without its voucher when that was refused as used up. When
    Redis fails here the cart stays taken for TAKEN_CART_TTL_SECONDS, where a
    retry under the same key finds it."""
    try:
        storage.give_back([(customer_id, idempotency_key)], drop_voucher=drop_voucher)
    except RedisError:
        logger.exception("could not give the cart of checkout %r back to customer %s", idempotency_key, customer_id)


def early_refusal(*, customer_id: int, idempotency_key: str) -> DomainError | None:
    """What admit_cart would refuse this checkout with (RateLimited, SoldOut,
    LimitReached), counted as admit_cart counts it, or None: the checkout goes
    on and admit_cart decides (nothing counted). Only while a sale is sold out
    and every answer can come from process memory and one Lua call; None
    whenever anything would need more (a query, a stale cache, Redis down, the
    queue's broker down, a gate on a Redis of its own)."""
    rules = gate_rules_in_memory()
    generation = hot_cache.generation
    if not hot_cache.sold_out or not rules or generation is None or not gate.shares_cart_redis():
        return None
    if queued_skus() and queue_producer().breaker.refusing():
        return None  # checkout answers 503 queue_unavailable first
    limit = ratelimit.shopper_window("checkout", customer_id)
    keys = [
        storage.cart_key(customer_id),
        GENERATION_KEY,
        limit.key,
        gate.replay_key(customer_id, idempotency_key),
        gate.REFUSALS_KEY,
    ]
    args: list = [generation, limit.limit, limit.ms, customer_id]
    for sku, rule in rules.items():
        keys += [gate.remaining_key(sku), gate.bought_key(sku)]
        args += [sku, rule.limit, rule.opens_ms, rule.closes_ms]
    try:
        verdict, detail, *now_sold_out = run_script(_REFUSAL, keys=keys, args=args)
    except RedisError:
        return None
    if verdict == b"stale":
        return None
    hot_cache.sold_out = frozenset(sku.decode() for sku in now_sold_out)
    if verdict == b"pass":
        return None
    if verdict == b"rate_limited":
        refusal: DomainError = RateLimited(retry_after=max(1, math.ceil(detail / 1000)))
    elif verdict == b"limit_reached":
        refusal = gate.LimitReached(sku=detail.decode(), limit=rules[detail.decode()].limit)
    else:
        refusal = gate.SoldOut(sku=detail.decode())
    CHECKOUT_REFUSALS.labels(refusal.code).inc()
    return refusal
