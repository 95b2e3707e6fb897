"""Lua scripts on a django-redis connection: registered once per connection,
run with EVALSHA (redis-py falls back to EVAL after a Redis restart).

Each script is a named file, `<app>/lua/<name>.lua`, owned by its app. A file
may define `local function`s for other apps' scripts to call: a script is
composed by putting the functions it calls before its body (`compose`)."""

import hashlib
import json
from functools import cache
from importlib.resources import files

from django_redis import get_redis_connection
from redis.exceptions import NoScriptError


@cache
def load_lua(package: str, name: str) -> str:
    """The text of `<package>/lua/<name>.lua`."""
    return (files(package) / "lua" / f"{name}.lua").read_text()


def compose(*parts: str) -> str:
    """One script from function definitions and a body, in that order."""
    return "\n".join(parts)


def lua_constants(**values: int | str) -> str:
    """`local NAME = value` for each: a value Python owns (a status code, a key's
    suffix), composed before the scripts that use it, so it is written once."""
    return "\n".join(f"local {name} = {json.dumps(value)}" for name, value in values.items())


@cache
def _sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def run_script(source: str, *, keys: list, args: list, alias: str = "default"):
    """One round-trip (EVALSHA; after a Redis restart, SCRIPT LOAD and again);
    raises redis.exceptions.RedisError when Redis is unreachable. EVALSHA as a
    plain command: redis-py's Script object checks on every call whether its
    client is a pipeline, an isinstance against a Protocol that cost as much as
    packing the command (py-spy of place_order, bench/checkout.py)."""
    client = get_redis_connection(alias)
    try:
        return client.execute_command("EVALSHA", _sha(source), len(keys), *keys, *args)
    except NoScriptError:
        client.script_load(source)
        return client.execute_command("EVALSHA", _sha(source), len(keys), *keys, *args)


GENERATION_LUA = load_lua("core", "generation")  # stale(): the hot-cache generation check
