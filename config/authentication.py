import json
import time
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django_redis import get_redis_connection
from redis.exceptions import RedisError
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from config.hotcache import hot_cache

# A safety net for views that make no generation-checked Redis call: a revoked
# token is refused by every process within this many seconds at the latest.
TOKEN_CACHE_SECONDS = 60


REDIS_TOKEN_SECONDS = 24 * 3600


def _redis_key(key: str) -> str:
    return f"auth:token:{key}"


def remember_tokens(tokens: Iterable[Token]) -> None:
    """Write-through: a token is in Redis from the moment it is issued (tokens
    made with bulk_create, which sends no signals, are passed here by hand)."""
    with get_redis_connection("default").pipeline(transaction=False) as pipe:
        for token in tokens:
            user = token.user
            fields = {"id": user.id, "username": user.username, "email": user.email,
                      "is_active": user.is_active, "is_staff": user.is_staff}  # fmt: skip
            pipe.set(_redis_key(token.key), json.dumps(fields), ex=REDIS_TOKEN_SECONDS)
        pipe.execute()


def remember_token(token: Token) -> None:
    remember_tokens([token])


def forget_tokens(keys: list[str]) -> None:
    if keys:
        get_redis_connection("default").delete(*[_redis_key(key) for key in keys])


class CachedTokenAuthentication(TokenAuthentication):
    """DRF token authentication without SQL once the token was issued or seen.

    Process memory first, then Redis (shared by every worker, written when a
    token is issued), then the database. A deleted token or a changed user is
    removed from Redis and bumps the cache generation (shop/signals.py), which
    views built on HotCacheApiView check in their own Redis call, so every
    process drops its copy. In a flash sale, refused shoppers never reach
    PostgreSQL, not even on their first request to a worker.
    """

    def authenticate_credentials(self, key):
        cached = hot_cache.tokens.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        hot_cache.ensure_generation()
        user_and_token = self._from_redis(key) or self._from_database(key)
        hot_cache.remember(hot_cache.tokens, key, (user_and_token, time.monotonic() + TOKEN_CACHE_SECONDS))
        return user_and_token

    def _from_redis(self, key: str):
        try:
            raw = get_redis_connection("default").get(_redis_key(key))
        except RedisError:
            return None
        if raw is None:
            return None
        fields = json.loads(raw)
        user = get_user_model()(**fields)
        user._state.adding = False
        return user, Token(key=key, user=user)

    def _from_database(self, key: str):
        user, token = super().authenticate_credentials(key)  # raises AuthenticationFailed
        try:
            remember_token(token)
        except RedisError:
            pass  # the cache is an optimisation; the database answered
        return user, token
