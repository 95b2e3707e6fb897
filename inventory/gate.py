"""The flash-sale gate: one Lua script, run atomically by Redis, admits a whole
cart or nothing.

For every gated SKU in the cart it checks the remaining counter and the
shopper's per-customer limit; only if all pass does it take the units. Refused
checkouts never reach PostgreSQL. Redis is a filter, not the truth: stock is
still reserved by the conditional UPDATE, so a stale counter can only
undersell. Keys (on the "gate" Redis, one instance, not a cluster):

  gate:{sku}:remaining    units the gate still lets through
  gate:{sku}:bought       hash customer id -> units admitted
  gate:refusals           hash: SKU -> checkouts turned away at the gate; SKU|limit_reached
                          -> of those, over the per-customer limit; SKU|rate_limited ->
                          checkouts rate-limited with the SKU in the cart (refusal_fields)
  checkout:{customer}:{idempotency key}   set once an order exists: a replay
                          passes without taking units
  gate:released:{token}   set by a release that must happen once (release_once)
  gate:cart-edits         hash: stripe (customer id mod CART_EDIT_STRIPES) -> edits of
                          gated lines of its shoppers' carts, admissions included
                          (note_cart_edit): what a process remembering a refusal
                          compares (orders/services/admission.py, RefusalMemory)
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django_redis import get_redis_connection
from redis.exceptions import RedisError

from core.errors import ErrorCode
from core.exceptions import DomainError
from core.hotcache import hot_cache
from core.redis_scripts import compose, load_lua, lua_constants, run_script
from core.sharding import clustered

REFUSALS_KEY = "gate:refusals"
# A sale's fields in REFUSALS_KEY are its SKU and the SKU with these suffixes; the scripts get the same names.
LIMIT_REACHED_SUFFIX, RATE_LIMITED_SUFFIX = "|limit_reached", "|rate_limited"
REPLAY_MARKER_TTL_SECONDS = 24 * 3600
CART_EDITS_KEY, CART_EDIT_STRIPES = "gate:cart-edits", 1024

# admit() and the refusal fields' suffixes: for scripts composed elsewhere (checkout's admission)
LUA = compose(
    lua_constants(
        LIMIT_REACHED_SUFFIX=LIMIT_REACHED_SUFFIX,
        RATE_LIMITED_SUFFIX=RATE_LIMITED_SUFFIX,
        CART_EDIT_STRIPES=CART_EDIT_STRIPES,
    ),
    load_lua("inventory", "gate"),
)
_ADMIT = compose(LUA, load_lua("inventory", "admit"))
_GIVE_BACK = load_lua("inventory", "give_back")
_RELEASE = compose(_GIVE_BACK, load_lua("inventory", "release"))
_RELEASE_ONCE = compose(_GIVE_BACK, load_lua("inventory", "release_once"))
_MARK_ORDERS = load_lua("inventory", "mark_orders")
_SOLD_OUT = load_lua("inventory", "sold_out")


@dataclass(frozen=True)
class GateRule:
    """What the gate checks for one SKU: the per-customer limit (0: none) and the
    window in Unix milliseconds (closes 0: open-ended), and how admitted checkouts go."""

    limit: int
    mode: str
    opens_ms: int
    closes_ms: int
    sale_price: int | None = None  # shown by the catalog; priced by the sale's promotion

    @property
    def starts_at(self) -> str:
        return _iso(self.opens_ms)

    @property
    def ends_at(self) -> str | None:
        return _iso(self.closes_ms) if self.closes_ms else None


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


class SoldOut(DomainError):
    code = ErrorCode.SOLD_OUT
    status = 409
    message = "This flash-sale item is sold out."


class LimitReached(DomainError):
    code = ErrorCode.LIMIT_REACHED
    status = 409
    message = "You have reached the per-customer limit for this flash-sale item."


class SaleNotStarted(DomainError):
    code = ErrorCode.SALE_NOT_STARTED
    status = 409
    message = "This flash sale has not started yet."


class SaleEnded(DomainError):
    code = ErrorCode.SALE_ENDED
    status = 409
    message = "This flash sale has ended."


class GateUnavailable(DomainError):
    code = ErrorCode.GATE_UNAVAILABLE
    status = 503
    message = "The flash-sale gate is unavailable; retry shortly."


def remaining_key(sku: str) -> str:
    return f"gate:{sku}:remaining"


def bought_key(sku: str) -> str:
    return f"gate:{sku}:bought"


def replay_key(customer_id: int, idempotency_key: str) -> str:
    return f"checkout:{customer_id}:{idempotency_key}"


def connection():
    return get_redis_connection("gate")


def shares_cart_redis() -> bool:
    """The gate on the cart's Redis (the default): checkout admits in one call.
    Never with carts on a Redis Cluster (core/sharding.py)."""
    return settings.CACHES["gate"]["LOCATION"] == settings.CACHES["default"]["LOCATION"] and not clustered()


def admit(*, customer_id: int, idempotency_key: str, lines: dict[str, int], rules: dict[str, GateRule]) -> bool:
    """Take the units of every gated line, or raise. False: a replay of an
    order that already exists, nothing taken."""
    skus = sorted(lines)
    keys = [replay_key(customer_id, idempotency_key)]
    args: list = [customer_id]
    for sku in skus:
        keys += [remaining_key(sku), bought_key(sku)]
        args += [sku, lines[sku], rules[sku].limit, rules[sku].opens_ms, rules[sku].closes_ms]
    keys += [REFUSALS_KEY, CART_EDITS_KEY]
    try:
        verdict, sku = run_script(_ADMIT, keys=keys, args=args, alias="gate")
    except RedisError as exc:
        raise GateUnavailable() from exc
    return judge(verdict, sku, rules)


def sold_out(skus: list[str], counts: dict[str, int]) -> tuple[frozenset[str], dict[int, int], dict[str, int]]:
    """Those of `skus` with no unit left in the gate, the cart edits per stripe,
    and how many shoppers bought each SKU, in one call that first adds `counts`
    (refusals-hash field -> refusals answered without the gate). Raises RedisError."""
    keys = [REFUSALS_KEY, CART_EDITS_KEY, *[key for sku in skus for key in (remaining_key(sku), bought_key(sku))]]
    args = [*skus, *[item for pair in counts.items() for item in pair]]
    skus_sold_out, edits, buyers = run_script(_SOLD_OUT, keys=keys, args=args, alias="gate")
    stripes = {int(edits[i]): int(edits[i + 1]) for i in range(0, len(edits), 2)}
    return frozenset(sku.decode() for sku in skus_sold_out), stripes, dict(zip(skus, buyers, strict=True))


def buyers(sku: str) -> frozenset[int]:
    """The shoppers the gate admitted for the SKU (its bought hash). Raises RedisError."""
    return frozenset(int(customer) for customer in connection().hkeys(bought_key(sku)))


def cart_edit_stripe(customer_id: int) -> int:
    return customer_id % CART_EDIT_STRIPES


def note_cart_edit(customer_id: int) -> None:
    """The shopper's cart changed a gated line (or was merged into): the processes
    remembering a refusal of that cart stop answering from memory by their next
    look at the gate (orders/services/admission.py). Raises RedisError."""
    hot_cache.refusals.pop(customer_id, None)  # this process's own memory, at once
    stripe = cart_edit_stripe(customer_id)
    edits = connection().hincrby(CART_EDITS_KEY, stripe, 1)
    hot_cache.cart_edits = {**hot_cache.cart_edits, stripe: edits}  # no memory of the cart as it was, here either


def judge(verdict: bytes, sku: bytes, rules: dict[str, GateRule]) -> bool:
    """The admit function's verdict: True when units were taken, False for a
    replay (nothing taken); raises when refused."""
    verdict, sku = verdict.decode(), sku.decode()
    if verdict == "not_started":
        raise SaleNotStarted(sku=sku, starts_at=rules[sku].starts_at)
    if verdict == "ended":
        raise SaleEnded(sku=sku, ended_at=rules[sku].ends_at)
    if verdict == "sold_out":
        raise SoldOut(sku=sku)
    if verdict == "limit_reached":
        raise LimitReached(sku=sku, limit=rules[sku].limit)
    if verdict == "missing":  # the counter was lost (Redis restarted): fail closed until synced
        raise GateUnavailable(sku=sku)
    return verdict == "admitted"


def release(*, customer_id: int, lines: dict[str, int]) -> None:
    """Give back what admit() took (the checkout failed or was a replay)."""
    skus = sorted(lines)
    keys = [key for sku in skus for key in (remaining_key(sku), bought_key(sku))]
    run_script(_RELEASE, keys=keys, args=[customer_id, *[lines[sku] for sku in skus]], alias="gate")


def release_once(releases: list[tuple[str, int, dict[str, int]]]) -> int:
    """(token, customer, lines) per release: each gives back what admit() took
    at most once per token, however often it is asked (a redelivered batch).
    One round-trip; returns how many gave units back now."""
    keys: list = []
    args: list = [REPLAY_MARKER_TTL_SECONDS]
    for token, customer_id, lines in releases:
        skus = sorted(lines)
        keys += [f"gate:released:{token}", *[key for sku in skus for key in (remaining_key(sku), bought_key(sku))]]
        args += [customer_id, len(skus), *[lines[sku] for sku in skus]]
    if not releases:
        return 0
    return run_script(_RELEASE_ONCE, keys=keys, args=args, alias="gate")


def mark_order_exists(*, customer_id: int, idempotency_key: str, order_id: int) -> None:
    mark_orders_exist([(customer_id, idempotency_key, order_id)])


def mark_orders_exist(orders: list[tuple[int, str, int]]) -> None:
    """(customer, idempotency key, order id) of written orders: their replays pass
    the gate without taking units. One script for a batch: a pipeline of one SET
    per order cost redis-py most of the queue writer's clean-up building and
    reading 500 commands (bench/README.md, "Figures behind code choices")."""
    if not orders:
        return
    keys = [replay_key(customer_id, idempotency_key) for customer_id, idempotency_key, _ in orders]
    run_script(
        _MARK_ORDERS, keys=keys, args=[REPLAY_MARKER_TTL_SECONDS, *[order_id for *_, order_id in orders]], alias="gate"
    )


def refusal_fields(sku: str) -> list[str]:
    """A sale's fields in REFUSALS_KEY: refusals at the gate (sold out or over
    the limit), of which over the limit, and checkouts rate-limited."""
    return [sku, sku + LIMIT_REACHED_SUFFIX, sku + RATE_LIMITED_SUFFIX]


def set_counter(*, sku: str, remaining: int, reset_customers: bool) -> None:
    conn = connection()
    with conn.pipeline() as pipe:
        pipe.set(remaining_key(sku), remaining)
        if reset_customers:
            pipe.delete(bought_key(sku))
            pipe.hdel(REFUSALS_KEY, *refusal_fields(sku))
        pipe.execute()


def remove(*, sku: str) -> None:
    """The sale's keys and counters gone from the gate."""
    with connection().pipeline() as pipe:
        pipe.delete(remaining_key(sku), bought_key(sku))
        pipe.hdel(REFUSALS_KEY, *refusal_fields(sku))
        pipe.execute()


def counters(*, skus: list[str]) -> dict[str, dict]:
    conn = connection()
    with conn.pipeline() as pipe:
        for sku in skus:
            pipe.get(remaining_key(sku))
            pipe.hmget(REFUSALS_KEY, refusal_fields(sku))
        values = pipe.execute()
    result = {}
    for i, sku in enumerate(skus):
        refused, limit_reached, rate_limited = (int(v or 0) for v in values[2 * i + 1])
        result[sku] = {
            "remaining": int(values[2 * i]) if values[2 * i] is not None else None,
            "refused": refused,  # at the gate: sold out or over the per-customer limit
            "by_reason": {
                "sold_out": refused - limit_reached,
                "limit_reached": limit_reached,
                "rate_limited": rate_limited,
            },
        }
    return result
