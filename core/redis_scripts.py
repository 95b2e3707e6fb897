"""Lua scripts on a django-redis connection: registered once per connection,
run with EVALSHA (redis-py falls back to EVAL after a Redis restart)."""

from functools import cache

from django_redis import get_redis_connection
from redis.commands.core import Script


@cache
def _registered(connection, source: str) -> Script:
    return connection.register_script(source)


def run_script(source: str, *, keys: list, args: list, alias: str = "default"):
    """One round-trip; raises redis.exceptions.RedisError when Redis is unreachable."""
    return _registered(get_redis_connection(alias), source)(keys=keys, args=args)
