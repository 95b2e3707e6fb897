"""Lua scripts on a django-redis connection: registered once per connection,
run with EVALSHA (redis-py falls back to EVAL after a Redis restart).

Each script is a named file, `<app>/lua/<name>.lua`, owned by its app. A file
may define `local function`s for other apps' scripts to call: a script is
composed by putting the functions it calls before its body (`compose`)."""

from functools import cache
from importlib.resources import files

from django_redis import get_redis_connection
from redis.commands.core import Script


@cache
def load_lua(package: str, name: str) -> str:
    """The text of `<package>/lua/<name>.lua`."""
    return (files(package) / "lua" / f"{name}.lua").read_text()


def compose(*parts: str) -> str:
    """One script from function definitions and a body, in that order."""
    return "\n".join(parts)


@cache
def _registered(connection, source: str) -> Script:
    return connection.register_script(source)


def run_script(source: str, *, keys: list, args: list, alias: str = "default"):
    """One round-trip; raises redis.exceptions.RedisError when Redis is unreachable."""
    return _registered(get_redis_connection(alias), source)(keys=keys, args=args)


GENERATION_LUA = load_lua("core", "generation")  # stale(): the hot-cache generation check
