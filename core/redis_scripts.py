"""Lua scripts on a django-redis connection: registered once per connection,
run with EVALSHA (redis-py falls back to EVAL after a Redis restart).

Each script is a named file, `<app>/lua/<name>.lua`, owned by its app. A file
may define `local function`s for other apps' scripts to call: a script is
composed by putting the functions it calls before its body (`compose`)."""

import hashlib
import json
import os
import threading
from functools import cache
from importlib.resources import files

from django.core.signals import setting_changed
from django.dispatch import receiver
from django_redis import get_redis_connection
from redis import Redis
from redis.connection import Connection
from redis.exceptions import ConnectionError, NoScriptError, TimeoutError

from core.sharding import CARTS, cluster, clustered


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


class _ThreadClients(threading.local):
    def __init__(self) -> None:
        self.by_alias: dict[str, Redis] = {}


_thread_clients = _ThreadClients()
_caches = [0]  # how many times the CACHES setting changed (tests): a thread's clients then open anew


def _forget_clients(**_) -> None:
    _thread_clients.by_alias.clear()


os.register_at_fork(after_in_child=_forget_clients)  # a child opens its own sockets


@receiver(setting_changed)
def _caches_changed(*, setting: str, **_) -> None:
    if setting == "CACHES":
        _caches[0] += 1


def script_client(alias: str) -> Redis:
    """This thread's client for scripts on `alias`: one connection of the alias's
    django-redis pool, kept by the thread (redis-py's single_connection_client)
    instead of taken from the pool and given back on every call. Taking and giving
    back cost two getpid() system calls and two lock rounds besides the pool's
    check for a stale connection, which run_script keeps (_fresh). A thread that
    ends gives its connection back to the pool."""
    clients = _thread_clients.by_alias
    kept = clients.get(alias)
    if kept is None or kept.caches != _caches[0]:
        if kept is not None:
            kept.close()
        pool = get_redis_connection(alias).connection_pool
        kept = clients[alias] = Redis(connection_pool=pool, single_connection_client=True)
        kept.caches = _caches[0]
    return kept


def _fresh(connection: Connection) -> None:
    """What the pool checks when it hands a connection out: one that Redis closed
    meanwhile (a restart, a timeout) or that holds unread data is opened anew
    before the script is sent, so a script is never lost to a stale socket nor
    sent twice by a retry."""
    connection.connect()  # nothing when connected; RedisError when Redis is down
    try:
        stale = connection.can_read()
    except (ConnectionError, TimeoutError, OSError):
        stale = True
    if stale:
        connection.disconnect()
        connection.connect()


def run_script(source: str, *, keys: list, args: list, alias: str = "default"):
    """One round-trip (EVALSHA; after a Redis restart, SCRIPT LOAD and again);
    raises redis.exceptions.RedisError when Redis is unreachable. EVALSHA as a
    plain command: redis-py's Script object checks on every call whether its
    client is a pipeline, an isinstance against a Protocol that cost as much as
    packing the command (py-spy of place_order, bench/checkout.py).
    Alias CARTS: per-customer keys, on the default Redis or on a Redis Cluster
    (core/sharding.py), where redis-py's cluster client routes the call by its
    keys' slot (refusing keys of several) and follows MOVED, ASK and failovers."""
    if alias == CARTS:
        if clustered():
            return _run_on_cluster(source, keys, args)
        alias = "default"
    connection = script_client(alias).connection
    _fresh(connection)
    command = ("EVALSHA", _sha(source), len(keys), *keys, *args)
    try:
        return _round_trip(connection, command)
    except NoScriptError:
        _round_trip(connection, ("SCRIPT LOAD", source))
        return _round_trip(connection, command)


def _run_on_cluster(source: str, keys: list, args: list):
    client = cluster()
    command = ("EVALSHA", _sha(source), len(keys), *keys, *args)
    try:
        return client.execute_command(*command)
    except NoScriptError:  # a new or promoted node: its script cache starts empty
        client.script_load(source)  # on every primary
        return client.execute_command(*command)


def _round_trip(connection: Connection, command: tuple):
    """The command sent and its answer read on the connection itself: the client's
    execute_command around it (its retry with none configured, its metrics hooks)
    cost as much again in Python (bench/README.md, the cart). Both calls close the
    connection on any error, as the client would."""
    connection.send_command(*command)
    return connection.read_response()


GENERATION_LUA = load_lua("core", "generation")  # stale(): the hot-cache generation check
