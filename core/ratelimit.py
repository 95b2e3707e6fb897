"""Rate limits: the one owner of their rates (settings.RATE_LIMITS, by scope),
their Redis keys (`rate:{scope}:{ident}`) and their counting (a fixed window,
core/lua/ratelimit.lua: one atomic Lua call, unlike DRF's cache throttles, which
read and then write back). The API's throttles (auth: per address), the cart's
and checkout's limits (per shopper, counted inside their own Lua call) and the
benches all go through here.

Per-address limits key on the real peer address: a client can put anything in
X-Forwarded-For, so the header counts only when TRUSTED_PROXIES says how many
proxies in front of the shop append to it."""

import ipaddress
import math
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from core.redis_scripts import compose, load_lua, run_script
from core.sharding import CARTS, customer_bucket, tagged, text_bucket

LUA = load_lua("core", "ratelimit")  # limited(): for scripts that count a limit in their own call
_COUNT = compose(LUA, load_lua("core", "count"))

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def client_address(request) -> str:
    """The client every per-address limit counts (rate limits, guest carts,
    unpaid holds): the peer (REMOTE_ADDR), or with TRUSTED_PROXIES = n, the
    address n entries from the right of X-Forwarded-For, the one the outermost
    trusted proxy saw. Entries further left are the client's own words and never
    used; a header too short or not an address falls back to the peer. An IPv6
    address counts as its /64 (one subscriber's network: its host part is the
    client's to change at will)."""
    peer = request.META.get("REMOTE_ADDR", "")
    hops = settings.TRUSTED_PROXIES
    if hops > 0:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        if len(forwarded) >= hops:
            try:
                return _holder(ipaddress.ip_address(forwarded[-hops]))
            except ValueError:
                pass
    try:
        return _holder(ipaddress.ip_address(peer))
    except ValueError:
        return peer


def _holder(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if address.version == 4:
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))


@dataclass(frozen=True)
class Window:
    """One client's counter for one scope: its Redis key, its limit (0: none) and length."""

    key: str
    limit: int
    ms: int


def window_key(scope: str | None, ident: str, *, bucket: int | None = None) -> str:
    """On a Redis Cluster tagged with `bucket` (by default `ident`'s own), so that
    a script can count it beside the keys of that bucket (core/sharding.py)."""
    return tagged("rate", text_bucket(ident) if bucket is None else bucket, f"{scope}:{ident}")


def window(scope: str | None, ident: str, *, bucket: int | None = None) -> Window:
    """`ident`'s window for `scope`; limit 0 when the scope has no rate (or is None)."""
    rate = settings.RATE_LIMITS.get(scope) if scope else None
    limit, period = parse_rate(rate) if rate else (0, 1)
    return Window(window_key(scope, ident, bucket=bucket), limit, period * 1000)


def shopper_window(scope: str | None, customer_id: int) -> Window:
    """Beside the shopper's cart (the cart's and checkout's scripts count it)."""
    return window(scope, f"user:{customer_id}", bucket=customer_bucket(customer_id))


def count(limit_window: Window) -> float | None:
    """Count one request in the window: the seconds to wait when over the limit,
    else None. Raises RedisError when Redis is unreachable."""
    if not limit_window.limit:
        return None
    wait_ms = run_script(_COUNT, keys=[limit_window.key], args=[limit_window.limit, limit_window.ms], alias=CARTS)
    return wait_ms / 1000 if wait_ms else None


def hit(*, scope: str, ident: str) -> float | None:
    """Count one request against `scope`'s limit for `ident`: the seconds to wait
    when over it, else None (also when no limit is set, or Redis is down: limits
    protect the shop; they must not take it down with Redis)."""
    try:
        return count(window(scope, ident))
    except RedisError:
        return None


@cache
def parse_rate(rate: str) -> tuple[int, int]:
    """'20/min' -> (20 requests, 60 seconds)."""
    count, period = rate.split("/")
    return int(count), _PERIODS[period]


class RedisRateThrottle(BaseThrottle):
    scope = ""
    methods = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})

    def get_ident(self, request) -> str:
        return client_address(request)

    def get_ident_key(self, request) -> str | None:
        user = request.user
        return f"user:{user.pk}" if user and user.is_authenticated else f"ip:{self.get_ident(request)}"

    def allow_request(self, request, view) -> bool:
        if request.method not in self.methods:
            return True
        ident = self.get_ident_key(request)
        if ident is None:
            return True
        self._wait = hit(scope=self.scope, ident=ident)
        return self._wait is None

    def wait(self) -> float:
        return math.ceil(getattr(self, "_wait", 1) or 1)


class AuthThrottle(RedisRateThrottle):
    """Per client IP: register and token requests are anonymous."""

    scope = "auth"

    def get_ident_key(self, request) -> str:
        return f"ip:{self.get_ident(request)}"
