"""Rate limits kept in Redis: a fixed window counted by one atomic Lua call
(one round-trip), unlike DRF's cache throttles (read, then write back)."""

import math

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from config.redis_scripts import run_script

# KEYS: counter. ARGV: window in ms. Returns {count in this window, ms left}.
_HIT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}
"""

_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """'20/min' -> (20 requests, 60 seconds)."""
    count, period = rate.split("/")
    return int(count), _PERIODS[period]


class RedisRateThrottle(BaseThrottle):
    scope = ""
    methods = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})

    def get_ident_key(self, request) -> str | None:
        user = request.user
        return f"user:{user.pk}" if user and user.is_authenticated else f"ip:{self.get_ident(request)}"

    def allow_request(self, request, view) -> bool:
        if request.method not in self.methods:
            return True
        rate = settings.RATE_LIMITS.get(self.scope)
        ident = self.get_ident_key(request)
        if not rate or ident is None:
            return True
        limit, period = parse_rate(rate)
        try:
            count, ms_left = run_script(_HIT, keys=[f"rate:{self.scope}:{ident}"], args=[period * 1000])
        except RedisError:
            return True  # limits protect the shop; they must not take it down with Redis
        self._wait = max(ms_left, 0) / 1000
        return count <= limit

    def wait(self) -> float:
        return math.ceil(getattr(self, "_wait", 1) or 1)


class AuthThrottle(RedisRateThrottle):
    """Per client IP: register and token requests are anonymous."""

    scope = "auth"

    def get_ident_key(self, request) -> str:
        return f"ip:{self.get_ident(request)}"
