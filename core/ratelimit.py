"""Rate limits kept in Redis: a fixed window counted by one atomic Lua call
(one round-trip), unlike DRF's cache throttles (read, then write back).

Per-address limits key on the real peer address: a client can put anything in
X-Forwarded-For, so the header counts only when TRUSTED_PROXIES says how many
proxies in front of the shop append to it."""

import ipaddress
import math

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from core.redis_scripts import run_script

# KEYS: counter. ARGV: window in ms. Returns {count in this window, ms left}.
_HIT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}
"""

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def client_address(request) -> str:
    """The address the request came from: the peer (REMOTE_ADDR), or with
    TRUSTED_PROXIES = n, the address n entries from the right of X-Forwarded-For,
    the one the outermost trusted proxy saw. Entries further left are the
    client's own words and never used; a header too short or not an address
    falls back to the peer."""
    peer = request.META.get("REMOTE_ADDR", "")
    hops = settings.TRUSTED_PROXIES
    if hops <= 0:
        return peer
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if len(forwarded) < hops:
        return peer
    try:
        return str(ipaddress.ip_address(forwarded[-hops]))
    except ValueError:
        return peer


def hit(*, scope: str, ident: str) -> float | None:
    """Count one request against `scope`'s limit for `ident`: the seconds to wait
    when over it, else None (also when no limit is set, or Redis is down: limits
    protect the shop; they must not take it down with Redis)."""
    rate = settings.RATE_LIMITS.get(scope)
    if not rate:
        return None
    limit, period = parse_rate(rate)
    try:
        count, ms_left = run_script(_HIT, keys=[f"rate:{scope}:{ident}"], args=[period * 1000])
    except RedisError:
        return None
    return max(ms_left, 0) / 1000 if count > limit else None


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
