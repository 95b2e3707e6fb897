import time

from rest_framework.authentication import TokenAuthentication

from config.hotcache import hot_cache

# A safety net for views that make no generation-checked Redis call: a revoked
# token is refused by every process within this many seconds at the latest.
TOKEN_CACHE_SECONDS = 60.0


class CachedTokenAuthentication(TokenAuthentication):
    """DRF token authentication served from process memory once warm.

    Meant for views built on HotCacheApiView, whose Redis call checks the cache
    generation: a deleted token or deactivated user bumps it (see shop/signals.py).
    """

    def authenticate_credentials(self, key):
        cached = hot_cache.tokens.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        hot_cache.ensure_generation()
        user_and_token = super().authenticate_credentials(key)  # raises AuthenticationFailed
        hot_cache.remember(hot_cache.tokens, key, (user_and_token, time.monotonic() + TOKEN_CACHE_SECONDS))
        return user_and_token
