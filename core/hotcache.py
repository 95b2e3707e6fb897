"""Process-local caches for the hot path (tokens and products), kept honest by
one generation counter in Redis.

The cart's Lua scripts receive the generation this process's caches were
filled under and refuse to run when Redis holds another one (see
cart/storage.py). So the check costs no extra round-trip: a cart request stays
at one Redis call and no SQL once warm. Any change of a product, token or user
bumps the generation after commit; the next cart call in every process then
sees `StaleCache`, drops its caches and is served again from the database.
"""

import logging
import os
import threading
from dataclasses import dataclass

from django.db import transaction
from django_redis import get_redis_connection
from redis.exceptions import RedisError
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from core.errors import ErrorCode
from core.exceptions import DomainError
from core.parsers import JSONParser
from core.sharding import BUCKETS, cluster, clustered, customer_redis, outages_as_connection_errors, tag_of

logger = logging.getLogger(__name__)
GENERATION_KEY = "shop:cache-generation"
GENERATION_LOCK_KEY = "shop:cache-generation:lock"


def generation_key_beside(key: str) -> str:
    """The copy of the generation a script touching `key` reads: in `key`'s hash slot."""
    return f"{GENERATION_KEY}:{tag_of(key)}" if clustered() else GENERATION_KEY


def _copy_key(bucket: int) -> str:
    return f"{GENERATION_KEY}:{{{bucket}}}"


MAX_ENTRIES = 100_000


class StaleCache(DomainError):
    """Redis holds a newer generation than the caches this process used.

    Retried once by HotCacheApiView; only a second miss in a row reaches the client."""

    code = ErrorCode.CATALOG_CHANGING
    status = 503
    message = "The catalog changed while serving this request; retry."


@dataclass(frozen=True)
class CachedProduct:
    sku: str
    name: str
    price: int
    is_active: bool
    weight_grams: int
    tax_class: str


class HotCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.generation: str | None = None
        self.tokens: dict[str, tuple] = {}  # token key -> ((user, token), monotonic expiry)
        self.products: dict[str, CachedProduct | None] = {}  # None: no such SKU
        self.flash_sales: dict | None = None  # inventory's flash sales (inventory/services/flash_sales.py)
        self.promotions = None  # shop's automatic promotions not yet ended (shop/selectors.py)
        self.vouchers: dict = {}  # shop's vouchers by code, as carts hold them; None: no such code
        self.charges = None  # shop's tax rates and shipping methods (shop/selectors.py)
        self.priced_carts: dict = {}  # cart's carts as last priced (cart/services.py _price)
        self.catalog = None  # inventory's browsable catalog (inventory/catalog_browse.py)
        self.sold_out: frozenset[str] = frozenset()  # what the gate last said (orders/services/admission.py)
        self.sold_out_heard = 0.0  # when it said all of it (monotonic; 0: not since the caches were filled)
        self.cart_edits: dict[int, int] = {}  # and the gate's cart edits per stripe, then
        self.buyers: dict[str, tuple[int, frozenset[int]]] = {}  # sold-out SKU -> (count, who bought it)
        self.refusals: dict = {}  # the gate's last refusal per shopper, for a moment (orders/services/admission.py)

    def ensure_generation(self) -> str:
        """The generation to fill the caches under; read before any database read
        so that a change committed meanwhile is caught by the next check."""
        if self.generation is None:
            raw = customer_redis().get(GENERATION_KEY)
            self.generation = raw.decode() if raw else "0"
        return self.generation

    def clear(self) -> None:
        with self._lock:
            self.generation = None
            self.tokens.clear()
            self.products.clear()
            self.flash_sales = None
            self.promotions = None
            self.vouchers.clear()
            self.charges = None
            self.priced_carts.clear()
            self.catalog = None
            self.sold_out = frozenset()
            self.sold_out_heard = 0.0
            self.cart_edits = {}
            self.buyers = {}
            self.refusals.clear()

    def check_generation(self) -> None:
        """For views whose own Redis call does not check the generation (the
        catalog, the orders list): one GET, StaleCache when the caches were filled
        under another generation (HotCacheApiView then serves from the database)."""
        if self.generation is None:
            return  # nothing cached yet
        key = _copy_key(os.getpid() % BUCKETS) if clustered() else GENERATION_KEY  # spread over the shards
        raw = customer_redis().get(key)
        if (raw.decode() if raw else "0") != self.generation:
            raise StaleCache()

    def remember(self, table: dict, key: str, value) -> None:
        if len(table) >= MAX_ENTRIES:
            table.clear()
        table[key] = value


hot_cache = HotCache()


def bump_generation() -> None:
    if clustered():
        _write_copies(bump=True)
    else:
        get_redis_connection("default").incr(GENERATION_KEY)
    hot_cache.clear()


def sync_generations(*, wait: bool = True) -> int:
    """On a cluster, every bucket's copy of the generation set to the generation
    where it differs (a shard lost it, or a bump died half-way); how many were
    written. Nothing on one Redis. Without `wait`, nothing when another process
    is writing the copies (LockError)."""
    return _write_copies(bump=False, wait=wait) if clustered() else 0


def _write_copies(*, bump: bool, wait: bool = True) -> int:
    """Under a lock, so that two bumps cannot leave copies of each other's values."""
    client = cluster()
    with (
        outages_as_connection_errors(),
        client.lock(GENERATION_LOCK_KEY, timeout=30, blocking=wait, blocking_timeout=5),
    ):
        if bump:
            generation, stored = client.incr(GENERATION_KEY), [None] * BUCKETS
        else:
            generation = int(client.get(GENERATION_KEY) or 0)
            stored = client.mget_nonatomic([_copy_key(bucket) for bucket in range(BUCKETS)])
        behind = [bucket for bucket, value in enumerate(stored) if value is None or int(value) != generation]
        with client.pipeline() as pipe:  # a pipeline's outage is one too
            for bucket in behind:
                pipe.set(_copy_key(bucket), generation)
            pipe.execute()
    return len(behind)


def _heal_copies() -> None:
    """A request stale twice in a row on a cluster: its bucket's copy may be one a
    shard lost. Written again now (the counter is the truth) rather than at beat's
    next sync; skipped when another process is at it."""
    try:
        sync_generations(wait=False)
    except RedisError:
        logger.warning("could not write the hot-cache generation's copies again", exc_info=True)


def bump_generation_on_commit() -> None:
    """For a change to what the caches hold: move the generation now and again
    after commit.

    Now, so that a Redis nobody can reach fails the transaction (RedisError, a
    503): a change the other processes could never hear of is not made. After
    commit, because a process may have refilled its caches from the old rows in
    between; if that second bump fails, it is logged (the change is committed)."""
    bump_generation()
    transaction.on_commit(_bump_after_commit)


def _bump_after_commit() -> None:
    try:
        bump_generation()
    except RedisError:
        logger.exception("cache generation not moved after commit: other processes may serve stale caches")


class HotCacheApiView(APIView):
    """An APIView whose handlers may raise StaleCache: the caches are dropped and
    the request is authenticated and handled once more from the database.

    These are the hot paths (cart, checkout): JSON in and out only, which spares
    DRF's content negotiation against the browsable API on every request."""

    # (The docstring above is also these operations' OpenAPI description.)
    # The retry is DRF's own dispatch() run again on the same Django request: it
    # builds a new DRF Request, so the shopper is authenticated and the body
    # parsed anew, and the permission and throttle checks run again. The body
    # can be parsed twice because DRF reads a JSON body through Django's
    # HttpRequest.body, which keeps it (tests/core/test_hotcache_retry.py).

    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]
    _json = JSONRenderer()

    def perform_content_negotiation(self, request, force=False):
        return (self._json, self._json.media_type)  # JSON is all these views speak

    def dispatch(self, request, *args, **kwargs):
        self._stale_cache_met = False
        self._stale_cache_retry = False
        response = super().dispatch(request, *args, **kwargs)
        if self._stale_cache_met:  # the first answer (a 503) is replaced by the retry's
            hot_cache.clear()
            self._stale_cache_retry = True
            response = super().dispatch(request, *args, **kwargs)
        return response

    def handle_exception(self, exc):
        if isinstance(exc, StaleCache):
            if not self._stale_cache_retry:
                self._stale_cache_met = True
            elif clustered():
                _heal_copies()  # this answer is still the 503; the next request finds the copy right
        return super().handle_exception(exc)
