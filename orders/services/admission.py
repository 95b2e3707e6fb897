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

Once the gate has refused a shopper (sold out, or over the SKU's limit), this
process answers that shopper's next checkouts with the same refusal from
memory, with no Redis call, as long as the gate's word allows (RefusalMemory
below). Admission always goes through the gate's script.

With the gate on a Redis of its own (or carts on a Redis Cluster), an early
refusal costs the gate nothing: the process asks the gate which SKUs are sold
out at most once every SOLD_OUT_MEMORY_MS (adding the refusals it answered
meanwhile), and refuses by reading the cart on the cart's Redis
(orders/lua/cart_refusal.lua). The gate's thread, the one a shop cannot shard,
then serves admissions only.
"""

import logging
import math
import threading
import time
from dataclasses import dataclass
from time import monotonic

from django.conf import settings
from redis.exceptions import RedisError

from cart import storage
from core import ratelimit
from core.exceptions import DomainError, RateLimited
from core.hotcache import GENERATION_KEY, StaleCache, generation_key_beside, hot_cache
from core.redis_scripts import GENERATION_LUA, compose, load_lua, run_script
from core.sharding import CARTS, customer_redis
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


class RefusalMemory:
    """Per process: customer -> the gate's last refusal of that shopper's checkout
    (sold_out or limit_reached, the SKU), under the hot-cache generation of then.
    Only refusals are remembered, never an admission: a checkout answered from
    here takes nothing, so this can refuse too long but never admit.

    - Over a SKU's limit: remembered for SOLD_OUT_MEMORY_MS.
    - Sold out: remembered while the gate, asked again every SOLD_OUT_MEMORY_MS
      (early_refusal), still says the SKU is sold out and the shopper's stripe
      of cart edits (gate.note_cart_edit; every edit of a gated line and every
      admission counts there) has not moved since before the cart was read, for
      at most REMEMBERED_CART_SECONDS. So units that come back, or a cart edited
      in another process, are seen at most SOLD_OUT_MEMORY_MS later, and a
      losing shopper's retries cost Redis nothing in between. An edit through
      this process forgets at once.

    The refusals it answers are counted here and added to the gate's refusals
    hash by the process's next call to the gate (refusal.lua and sold_out.lua
    add them first: no call of their own), or in one pipeline with the first
    refusal from memory SOLD_OUT_MEMORY_MS after the first uncounted one,
    whichever comes first. No timer: when checkouts stop, the last moment's
    refusals wait for the process's next one."""

    MAX_ENTRIES = 100_000  # one shopper's refusal each; cleared whole when full, as the hot cache does
    # A process meets a shopper again only after the shopper has tried the others; the bound for a memory
    # made in the instant between an edit's two counts, when the second fails (cart/services.py, _editing).
    REMEMBERED_CART_SECONDS = 600

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.unflushed: dict[str, int] = {}  # refusals-hash field -> refusals answered here, not yet in Redis
        self._flush_at = 0.0  # monotonic: the counts go to Redis with the first refusal from memory after it

    @property
    def refusals(self) -> dict[int, tuple[str, str, float, str, int | None]]:
        """customer -> (verdict, sku, deadline, generation, cart edits seen: None
        for a memory of SOLD_OUT_MEMORY_MS); kept with the hot cache, dropped with it."""
        return hot_cache.refusals

    @staticmethod
    def fresh() -> bool:
        """The gate said which SKUs are sold out, and the cart edits, within SOLD_OUT_MEMORY_MS."""
        return monotonic() - hot_cache.sold_out_heard < settings.SOLD_OUT_MEMORY_MS / 1000

    def edits_seen(self, customer_id: int) -> int | None:
        """The shopper's stripe of cart edits as the gate last said them: taken
        before the cart is read, for remember(); None when that word is stale."""
        return hot_cache.cart_edits.get(gate.cart_edit_stripe(customer_id), 0) if self.fresh() else None

    def remember(
        self, customer_id: int, verdict: str, sku: str, generation: str | None, edits: int | None = None
    ) -> None:
        if generation is None or settings.SOLD_OUT_MEMORY_MS <= 0:
            return
        if len(self.refusals) >= self.MAX_ENTRIES:
            self.refusals.clear()
        edits = edits if verdict == "sold_out" else None
        lasts = settings.SOLD_OUT_MEMORY_MS / 1000 if edits is None else self.REMEMBERED_CART_SECONDS
        self.refusals[customer_id] = (verdict, sku, monotonic() + lasts, generation, edits)

    def forget(self, customer_id: int) -> None:
        self.refusals.pop(customer_id, None)

    def recall(self, customer_id: int, generation: str | None, rules: dict) -> tuple[str, str] | None:
        """The refusal still remembered for this shopper, counted as the gate counts it."""
        found = self.refusals.get(customer_id)
        if found is None:
            return None
        verdict, sku, deadline, remembered_under, edits = found
        lapsed = monotonic() >= deadline or remembered_under != generation or sku not in rules
        if not lapsed and edits is not None:  # sold out: as long as the gate's fresh word allows
            lapsed = (
                not self.fresh()
                or sku not in hot_cache.sold_out
                or edits != self.edits_seen(customer_id)
                or bought(customer_id, sku)  # a retry of that order must find it: the ordinary path
                or not _in_window(rules[sku])
            )
        if lapsed:
            self.refusals.pop(customer_id, None)
            return None
        self.count([sku, sku + gate.LIMIT_REACHED_SUFFIX] if verdict == "limit_reached" else [sku])
        return verdict, sku

    def count(self, fields: list[str]) -> None:
        """Refusals answered without the gate, for its refusals hash: they go with
        the process's next call to the gate, or in one pipeline SOLD_OUT_MEMORY_MS
        after the first of them, whichever comes first."""
        now = monotonic()
        with self._lock:
            if not self.unflushed:
                self._flush_at = now + settings.SOLD_OUT_MEMORY_MS / 1000
            for field in fields:
                self.unflushed[field] = self.unflushed.get(field, 0) + 1
        if now >= self._flush_at:
            self.flush()

    def take(self) -> dict[str, int]:
        """The counts not yet in the gate, taken out (for a call that adds them: refusal.lua)."""
        with self._lock:
            counts, self.unflushed = self.unflushed, {}
        return counts

    def put_back(self, counts: dict[str, int]) -> None:
        """Counts taken for a call that failed."""
        with self._lock:
            for field, count in counts.items():
                self.unflushed[field] = self.unflushed.get(field, 0) + count

    def flush(self) -> None:
        """The refusals answered from memory, into the gate's refusals hash (one call)."""
        counts = self.take()
        if not counts:
            return
        try:
            with gate.connection().pipeline(transaction=False) as pipe:
                for field, count in counts.items():
                    pipe.hincrby(gate.REFUSALS_KEY, field, count)
                pipe.execute()
        except RedisError:
            logger.exception("refusals answered from memory not counted in the gate: %s", counts)


refusal_memory = RefusalMemory()


_ADMISSION = compose(GENERATION_LUA, ratelimit.LUA, storage.LUA, gate.LUA, load_lua("orders", "admission"))
_REFUSAL = compose(GENERATION_LUA, ratelimit.LUA, storage.LUA, gate.LUA, load_lua("orders", "refusal"))
_CART_REFUSAL = compose(GENERATION_LUA, ratelimit.LUA, storage.LUA, load_lua("orders", "cart_refusal"))


def _cached_address(customer_id: int) -> bytes | None:
    try:
        return customer_redis().get(address_key(customer_id))
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
    edits = refusal_memory.edits_seen(customer_id)  # before the cart is read
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
        except BaseException as exc:
            if took:
                give_back_cart(customer_id, idempotency_key)
            if isinstance(exc, gate.SoldOut | gate.LimitReached):
                _heard_refusal(customer_id, exc, generation, edits)
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
    keys.append(gate.CART_EDITS_KEY)
    try:
        status, flat, verdict, sku, *rest = run_script(_ADMISSION, keys=keys, args=args)
    except RedisError as exc:
        raise storage.unavailable(exc) from exc
    storage.check_status(status, flat)
    cart = storage.as_cart(flat)
    lines = cart.lines
    gated = {sku: quantity for sku, quantity in lines.items() if sku in rules}
    if verdict == b"sold_out":
        _heard_sold_out(sku.decode())
    if verdict in (b"sold_out", b"limit_reached"):
        refusal_memory.remember(customer_id, verdict.decode(), sku.decode(), generation, edits)
    admitted = bool(gated) and gate.judge(verdict, sku, rules)
    return Admission(lines, cart.voucher, gated, admitted, rest[0], bool(rest[1]), _code(cart))


def _heard_refusal(customer_id: int, refusal: DomainError, generation: str, edits: int | None) -> None:
    """admit_cart's refusal by a gate on a Redis of its own, remembered as the one-call path does."""
    sku, sold_out = refusal.details["sku"], isinstance(refusal, gate.SoldOut)
    if sold_out:
        _heard_sold_out(sku)
    refusal_memory.remember(customer_id, "sold_out" if sold_out else "limit_reached", sku, generation, edits)


def _heard_sold_out(sku: str) -> None:
    """The gate refused a checkout as sold out: early refusals start. That may
    mean fewer units left than that cart wanted, not none: the gate's word is
    asked again before anything is answered from it."""
    hot_cache.sold_out, hot_cache.sold_out_heard = hot_cache.sold_out | {sku}, 0.0


def bought(customer_id: int, sku: str) -> bool:
    """The gate admitted this shopper for the sold-out SKU, as of its last word."""
    return customer_id in hot_cache.buyers.get(sku, (0, frozenset()))[1]


def _in_window(rule) -> bool:
    now_ms = time.time() * 1000
    return rule.opens_ms <= now_ms and (not rule.closes_ms or now_ms < rule.closes_ms)


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
    queue's broker down). Every SOLD_OUT_MEMORY_MS the process asks the gate
    which SKUs are sold out and how far each stripe of carts was edited (one
    call, _hear_the_gate): what RefusalMemory answers from, with no call."""
    rules = gate_rules_in_memory()
    generation = hot_cache.generation
    if not hot_cache.sold_out or not rules or generation is None:
        return None
    if queued_skus() and queue_producer().breaker.refusing():
        return None  # checkout answers 503 queue_unavailable first
    apart = not gate.shares_cart_redis()
    if (apart or settings.SOLD_OUT_MEMORY_MS > 0) and not _hear_the_gate(rules):
        return None
    if (remembered := refusal_memory.recall(customer_id, generation, rules)) is not None:
        return _refusal(*remembered, rules)
    edits = refusal_memory.edits_seen(customer_id)  # before the cart is read
    if apart:
        return _refused_by_the_cart(customer_id, generation, rules, edits)
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
    counts = refusal_memory.take()  # the refusals answered from memory, counted by this call
    for field, count in counts.items():
        args += [field, count]
    try:
        verdict, detail, *now_sold_out = run_script(_REFUSAL, keys=keys, args=args)
    except RedisError:
        refusal_memory.put_back(counts)
        return None
    if verdict == b"stale":
        return None
    hot_cache.sold_out = frozenset(sku.decode() for sku in now_sold_out)
    if verdict == b"pass":
        refusal_memory.forget(customer_id)
        return None
    if verdict == b"rate_limited":
        return _rate_limited(detail)
    refusal_memory.remember(customer_id, verdict.decode(), detail.decode(), generation, edits)
    return _refusal(verdict.decode(), detail.decode(), rules)


_hearing = threading.Lock()  # one question to the gate at a time per process


def _hear_the_gate(rules: dict) -> bool:
    """Which gated SKUs are sold out, who bought them and the cart edits per
    stripe, as the gate said within SOLD_OUT_MEMORY_MS, else asked now (one call,
    which carries the refusals answered meanwhile; the buyers of a SKU are read
    again only when their count moved), after checking the cache generation
    (a revoked token, a changed sale: caches dropped). False when either fails."""
    if refusal_memory.fresh():
        return True
    with _hearing:
        if refusal_memory.fresh():
            return True  # another thread asked meanwhile
        asked = monotonic()  # the word is as old as the question
        try:
            hot_cache.check_generation()
        except StaleCache:
            hot_cache.clear()
            return False
        except RedisError:
            return False
        counts = refusal_memory.take()
        try:
            sold_out, edits, buyers = gate.sold_out(sorted(rules), counts)
        except RedisError:
            refusal_memory.put_back(counts)
            return False
        try:
            known = {sku: _buyers(sku, buyers[sku]) for sku in sold_out}
        except RedisError:
            return False
        hot_cache.sold_out, hot_cache.cart_edits, hot_cache.buyers = sold_out, edits, known
        hot_cache.sold_out_heard = asked
        return True


def _buyers(sku: str, count: int) -> tuple[int, frozenset[int]]:
    kept = hot_cache.buyers.get(sku)
    if kept is not None and kept[0] == count:
        return kept
    return count, gate.buyers(sku) if count else frozenset()


def _refused_by_the_cart(customer_id: int, generation: str, rules: dict, edits: int | None) -> DomainError | None:
    """early_refusal with the gate on a Redis of its own (or carts on a cluster):
    the SKUs the gate called sold out within SOLD_OUT_MEMORY_MS, and one call on
    the cart's Redis (orders/lua/cart_refusal.lua). Units that come back are
    admitted at most SOLD_OUT_MEMORY_MS later."""
    sold_out = hot_cache.sold_out
    if not sold_out or any(bought(customer_id, sku) for sku in sold_out):
        return None  # a buyer's retry may be of that order: the ordinary path finds it
    cart = storage.cart_key(customer_id)
    limit = ratelimit.shopper_window("checkout", customer_id)
    keys = [cart, generation_key_beside(cart), limit.key, storage.taken_key(customer_id)]
    args: list = [generation, limit.limit, limit.ms]
    for sku in sorted(rules):  # gate.admit's order
        rule = rules[sku]
        args += [sku, 1 if sku in sold_out else 0, rule.opens_ms, rule.closes_ms]
    try:
        verdict, detail, *held = run_script(_CART_REFUSAL, keys=keys, args=args, alias=CARTS)
    except RedisError:
        return None
    if verdict == b"rate_limited":
        refusal_memory.count([sku.decode() + gate.RATE_LIMITED_SUFFIX for sku in held])
        return _rate_limited(detail)
    if verdict != b"sold_out":
        return None
    sku = detail.decode()
    refusal_memory.count([sku])
    refusal_memory.remember(customer_id, "sold_out", sku, generation, edits)
    return _refusal("sold_out", sku, rules)


def _rate_limited(wait_ms: int) -> DomainError:
    refusal = RateLimited(retry_after=max(1, math.ceil(wait_ms / 1000)))
    CHECKOUT_REFUSALS.labels(refusal.code).inc()
    return refusal


def _refusal(verdict: str, sku: str, rules: dict) -> DomainError:
    if verdict == "limit_reached":
        refusal: DomainError = gate.LimitReached(sku=sku, limit=rules[sku].limit)
    else:
        refusal = gate.SoldOut(sku=sku)
    CHECKOUT_REFUSALS.labels(refusal.code).inc()
    return refusal
