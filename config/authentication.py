import json
import time

from django.contrib.auth import get_user_model
from django_redis import get_redis_connection
from redis.exceptions import RedisError
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from config.hotcache import hot_cache

# A safety net for views that make no generation-checked Redis call: a revoked
# token is refused by every process within this many seconds at the latest.
TOKEN_CACHE_SECONDS = 60


class CachedTokenAuthentication(TokenAuthentication):
    """DRF token authentication without SQL once any process has seen the token.

    Process memory first, then Redis (shared by every worker), then the
    database. Both caches belong to the hot-cache generation: a deleted token
    or a changed user bumps it (shop/signals.py), the Redis entries of the old
    generation are never read again, and views built on HotCacheApiView check
    the generation in their own Redis call. In a flash sale this keeps the
    first request of each shopper on each worker away from PostgreSQL too.
    """

    def authenticate_credentials(self, key):
        cached = hot_cache.tokens.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        generation = hot_cache.ensure_generation()
        user_and_token = self._from_redis(generation, key) or self._from_database(generation, key)
        hot_cache.remember(hot_cache.tokens, key, (user_and_token, time.monotonic() + TOKEN_CACHE_SECONDS))
        return user_and_token

    @staticmethod
    def _redis_key(generation: str, key: str) -> str:
        return f"auth:{generation}:{key}"

    def _from_redis(self, generation: str, key: str):
        try:
            raw = get_redis_connection("default").get(self._redis_key(generation, key))
        except RedisError:
            return None
        if raw is None:
            return None
        fields = json.loads(raw)
        user = get_user_model()(**fields)
        user._state.adding = False
        return user, Token(key=key, user=user)

    def _from_database(self, generation: str, key: str):
        user, token = super().authenticate_credentials(key)  # raises AuthenticationFailed
        fields = {"id": user.id, "username": user.username, "email": user.email, "is_active": user.is_active,
                  "is_staff": user.is_staff}  # fmt: skip
        try:
            get_redis_connection("default").set(
                self._redis_key(generation, key), json.dumps(fields), ex=TOKEN_CACHE_SECONDS
            )
        except RedisError:
            pass  # the cache is an optimisation; the database answered
        return user, token
