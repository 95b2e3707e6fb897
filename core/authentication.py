"""API tokens: django-rest-knox's (only a SHA-512 digest is stored, each token
expires), with a cache that keeps the hot paths free of SQL.

A token is 64 hex characters. Anything else is refused before any query or
Redis call. Caches are keyed by the digest, never by the token itself: a Redis
dump or a process's memory does not hand out working tokens.

With the user, a token's entry keeps facts the apps above need on their hot
paths (`remembered_with_users`): they are worked out when the token is
remembered, so that reading them costs no query.
"""

import json
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django_redis import get_redis_connection
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.models import AuthToken
from knox.settings import knox_settings
from redis.exceptions import RedisError
from rest_framework.exceptions import AuthenticationFailed

# A safety net for views that make no generation-checked Redis call: a revoked
# token is refused by every process within this many seconds at the latest.
TOKEN_CACHE_SECONDS = 60
REDIS_TOKEN_SECONDS = 24 * 3600
_TOKEN = re.compile(rb"[0-9a-f]{64}")


def token_digest(token: str) -> str:
    """knox's hash_token, without its hexlify/unhexlify round of the token's bytes
    (which gives them back unchanged): a third of its cost on every request."""
    return knox_settings.SECURE_HASH_ALGORITHM(token.encode()).hexdigest()


def _redis_key(digest: str) -> str:
    return f"auth:token:{digest}"


def _well_formed(token: bytes | str) -> str:
    if isinstance(token, str):
        token = token.encode("utf-8", "surrogateescape")
    if not _TOKEN.fullmatch(token):
        raise AuthenticationFailed("Invalid token.")
    return token.decode()


# What the apps above keep with a remembered user, so that their hot paths need no
# query for it (shop/established.py: whether the e-mail is verified; orders: whether
# an order was paid): each source, a function of users -> {user id: {fact: a JSON
# value}}, is asked whenever tokens are remembered (issued, or read from the
# database); the answer is the user's `remembered_facts`, in Redis and in memory.
_FACT_SOURCES: dict[str, Callable[[list], dict[int, dict]]] = {}


def remembered_with_users(source: Callable[[list], dict[int, dict]]) -> Callable[[list], dict[int, dict]]:
    """Register a source of facts kept with remembered users (a decorator; a
    source registered again by its module replaces itself)."""
    _FACT_SOURCES[f"{source.__module__}.{source.__qualname__}"] = source
    return source


def _user_facts(users: list) -> dict[int, dict]:
    facts: dict[int, dict] = {user.pk: {} for user in users}
    for source in _FACT_SOURCES.values():
        for user_id, found in source(users).items():
            facts[user_id].update(found)
    return facts


def remember_tokens(tokens: Iterable[AuthToken]) -> None:
    """Write-through: a token is in Redis from the moment it is issued (tokens
    made with bulk_create, which sends no signals, are passed here by hand),
    with its user's facts (one query per source for all the tokens)."""
    now = time.time()
    tokens = list(tokens)
    facts = _user_facts(list({token.user.pk: token.user for token in tokens}.values()))
    with get_redis_connection("default").pipeline(transaction=False) as pipe:
        for token in tokens:
            user = token.user
            user.remembered_facts = facts[user.pk]
            expiry = token.expiry.timestamp() if token.expiry else None
            ttl = REDIS_TOKEN_SECONDS if expiry is None else min(REDIS_TOKEN_SECONDS, int(expiry - now))
            if ttl <= 0:
                continue
            fields = {
                "id": user.id,
                "username": user.username,
                "email": user.email,
                "is_active": user.is_active,
                "is_staff": user.is_staff,
                "date_joined": user.date_joined.isoformat(),
            }
            entry = {"user": fields, "facts": facts[user.pk], "expiry": expiry}
            pipe.set(_redis_key(token.digest), json.dumps(entry), ex=ttl)
        pipe.execute()


def forget_tokens(digests: list[str]) -> None:
    """Raises RedisError when Redis cannot be told: the caller decides whether that fails it."""
    if digests:
        get_redis_connection("default").delete(*[_redis_key(digest) for digest in digests])


class TokenAuthentication(KnoxTokenAuthentication):
    """knox's, from the database, refusing a malformed token before any query
    (knox would decode it as UTF-8 and fail with a 500 on other bytes)."""

    def authenticate_credentials(self, token: bytes):
        return super().authenticate_credentials(_well_formed(token).encode())


class CachedTokenAuthentication(TokenAuthentication):
    """Token authentication without SQL once the token was issued or seen.

    Process memory first, then Redis (shared by every worker, written when a
    token is issued), then the database. Expiry is checked at every step. A
    revoked token or a changed user is removed from Redis and bumps the cache
    generation before the change commits (shop/signals.py; if Redis cannot be
    told, the revocation fails instead of leaving the token alive), and views
    built on HotCacheApiView check the generation in their own Redis call, so
    every process drops its copy. In a flash sale, refused shoppers never
    reach PostgreSQL, not even on their first request to a worker.
    """

    def authenticate_credentials(self, token: bytes):
        # Imported here: DRF imports this module (DEFAULT_AUTHENTICATION_CLASSES) while
        # rest_framework.views, which core.hotcache needs, is still being imported.
        from core.hotcache import hot_cache

        digest = token_digest(_well_formed(token))
        cached = hot_cache.tokens.get(digest)
        if cached is not None and cached[1] > time.monotonic() and _alive(cached[2]):
            _LAST_DIGEST[cached[0][0].pk] = digest
            return cached[0]
        hot_cache.ensure_generation()
        found = self._from_redis(digest) or self._from_database(token)
        if not _alive(found[1]):
            raise AuthenticationFailed("Invalid token.")
        return _remember(digest, found)

    def _from_redis(self, digest: str):
        try:
            raw = get_redis_connection("default").get(_redis_key(digest))
        except RedisError:
            return None
        if raw is None:
            return None
        cached = json.loads(raw)
        fields = cached["user"]
        joined = fields.pop("date_joined", None)  # absent from entries written before it was kept
        user = get_user_model()(**fields)
        user.date_joined = datetime.fromisoformat(joined) if joined else None  # None: unknown, not "now"
        user.remembered_facts = cached.get("facts")  # None: an entry written before facts were kept
        user._state.adding = False
        if not user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        expiry = cached["expiry"]
        token = AuthToken(digest=digest, user=user, expiry=datetime.fromtimestamp(expiry, tz=UTC) if expiry else None)
        return (user, token), expiry

    def _from_database(self, token: bytes):
        user, auth_token = super().authenticate_credentials(token)  # raises AuthenticationFailed
        try:
            remember_tokens([auth_token])
        except RedisError:
            pass  # the cache is an optimisation; the database answered
        return (user, auth_token), auth_token.expiry.timestamp() if auth_token.expiry else None


def remembered_user(authorization: str, *, or_from_redis: bool = False, generation_checked: bool = False):
    """The user of an `Authorization: Token ...` header from this process's
    memory only (what CachedTokenAuthentication keeps), or None: never a query,
    never an error. For answers given before DRF runs, which check the cache
    generation themselves (orders/early_refusal.py). With `or_from_redis`, a
    token this process no longer holds (its memory lasts TOKEN_CACHE_SECONDS)
    is looked up in Redis as authentication would, with one call, and kept
    again: without it, a shopper refused for longer than a minute took the
    whole ordinary path once a minute in every worker (bench/flash_sale.py).
    With `generation_checked`, a token held past TOKEN_CACHE_SECONDS still
    answers (until the token's own expiry): for a caller whose next Redis call
    checks the cache generation, which every revocation moves (the early
    refusal's), so that a refused shopper costs no token lookup a minute."""
    prefix, _, token = authorization.partition(" ")
    if prefix.lower() != knox_settings.AUTH_HEADER_PREFIX.lower() or not _TOKEN.fullmatch(token.encode()):
        return None
    from core.hotcache import hot_cache  # see authenticate_credentials

    digest = token_digest(token)
    cached = hot_cache.tokens.get(digest)
    if cached is not None and (generation_checked or cached[1] > time.monotonic()) and _alive(cached[2]):
        _LAST_DIGEST[cached[0][0].pk] = digest
        return cached[0][0]
    if not or_from_redis:
        return None
    try:
        found = CachedTokenAuthentication()._from_redis(digest)
    except (AuthenticationFailed, ValueError, KeyError, TypeError):
        return None
    if found is None or not _alive(found[1]):
        return None
    return _remember(digest, found)[0]


# user id -> the digest of the token this process authenticated them with last: the
# entry itself is the token's (hot_cache.tokens), so it lives and dies with it.
_LAST_DIGEST: dict[int, str] = {}


def _remember(digest: str, found: tuple) -> tuple:
    """(user, token) of `found` ((user, token), expiry), kept in this process's
    memory for TOKEN_CACHE_SECONDS, and noted as its user's last."""
    from core.hotcache import MAX_ENTRIES, hot_cache  # see authenticate_credentials

    hot_cache.remember(hot_cache.tokens, digest, (found[0], time.monotonic() + TOKEN_CACHE_SECONDS, found[1]))
    if len(_LAST_DIGEST) >= MAX_ENTRIES:
        _LAST_DIGEST.clear()
    _LAST_DIGEST[found[0][0].pk] = digest
    return found[0]


def remembered_user_by_id(user_id: int):
    """The user this process authenticated last with any of their tokens, as
    remembered (with `remembered_facts`: None when unknown), or None when this
    process holds that token no more: never a query, never a Redis call. For a
    service called by a view with the user it has just authenticated
    (shop/established.py)."""
    from core.hotcache import hot_cache  # see authenticate_credentials

    cached = hot_cache.tokens.get(_LAST_DIGEST.get(user_id, ""))
    if cached is None or cached[1] <= time.monotonic() or not _alive(cached[2]) or cached[0][0].pk != user_id:
        return None
    return cached[0][0]


def forget_remembered_user(user_id: int, digests: list[str]) -> None:
    """This process's memory of those tokens of the user dropped (Redis is the
    caller's: forget_tokens)."""
    from core.hotcache import hot_cache  # see authenticate_credentials

    _LAST_DIGEST.pop(user_id, None)
    for digest in digests:
        hot_cache.tokens.pop(digest, None)


def _alive(expiry: float | None) -> bool:
    return expiry is None or expiry > time.time()
