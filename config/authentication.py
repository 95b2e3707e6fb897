from rest_framework.authentication import TokenAuthentication

from config.hotcache import hot_cache


class CachedTokenAuthentication(TokenAuthentication):
    """DRF token authentication served from process memory once warm.

    Only for views built on HotCacheApiView, whose Redis call checks the cache
    generation: a deleted token or deactivated user bumps it (see shop/signals.py).
    """

    def authenticate_credentials(self, key):
        cached = hot_cache.tokens.get(key)
        if cached is not None:
            return cached
        hot_cache.ensure_generation()
        user_and_token = super().authenticate_credentials(key)  # raises AuthenticationFailed
        hot_cache.remember(hot_cache.tokens, key, user_and_token)
        return user_and_token
