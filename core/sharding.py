"""What is per customer in Redis, on one Redis or on a Redis Cluster.

Carts, guest carts (with their vouchers and shipping), rate limits and saved
addresses live on the default Redis (REDIS_URL), or, with
REDIS_CLUSTER_NODES, on a Redis Cluster through redis-py's cluster client.
A Lua script on a cluster may only touch keys of one hash slot, so there each
such key carries a hash tag, `{N}`: its *bucket*. A shopper's keys share the
bucket `customer id mod BUCKETS`; a guest cart's keys, the bucket of its
token's digest; an address's counters, the bucket of the address. Every cart
script also reads the hot-cache generation (core/hotcache.py), which has one
copy per bucket (`generation_key_beside`), so a cart call stays one
round-trip on a cluster too.

BUCKETS, not one tag per customer: the generation must be copied into every
tag a script can run under, and a bump writes every copy. 1,024 copies cost
a bump about a millisecond and spread over the cluster's shards as evenly as
customers would (tests/core/test_sharding.py).

On a single Redis (the default) no key is tagged: key names stay as they were.
"""

import os
import threading
import zlib
from contextlib import contextmanager

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django_redis import get_redis_connection
from redis import Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError, RedisClusterException

BUCKETS = 1024
CARTS = "carts"  # run_script's alias for per-customer keys (core/redis_scripts.py)


def clustered() -> bool:
    return bool(settings.REDIS_CLUSTER_NODES)


def customer_bucket(customer_id: int) -> int:
    return customer_id % BUCKETS


def text_bucket(text: str) -> int:
    """The bucket of a guest token's digest or a client address."""
    return zlib.crc32(text.encode()) % BUCKETS


def tagged(prefix: str, bucket: int, rest: str) -> str:
    """`prefix:{bucket}:rest` on a cluster, `prefix:rest` on one Redis."""
    return f"{prefix}:{{{bucket}}}:{rest}" if clustered() else f"{prefix}:{rest}"


def tag_of(key: str) -> str:
    """A tagged key's hash tag (`{17}`); '' for an untagged key."""
    start = key.find("{")
    return key[start : key.index("}", start) + 1] if start >= 0 else ""


# What redis-py's cluster client raises as RedisClusterException (not a RedisError)
# when no node answers or slots have no node: an outage like any other, a 503.
_UNREACHABLE = ("cannot be connected", "not covered", "could not agree", "has no redis_connection", "No targets")


@contextmanager
def outages_as_connection_errors():
    """A cluster nobody can reach raised as a RedisError (ConnectionError), as a
    single Redis's outage is, so that every `except RedisError` of the shop answers
    it (503, or a limit that fails open). A call whose keys span slots stays a
    RedisClusterException: a bug, not an outage."""
    try:
        yield
    except RedisClusterException as error:
        if any(text in str(error) for text in _UNREACHABLE):
            raise ConnectionError(str(error)) from error
        raise


class ShopCluster(RedisCluster):
    """redis-py's cluster client, its outages RedisErrors (outages_as_connection_errors)."""

    def execute_command(self, *args, **kwargs):
        with outages_as_connection_errors():
            return super().execute_command(*args, **kwargs)


class _Cluster:
    lock = threading.Lock()
    client: RedisCluster | None = None


def cluster() -> RedisCluster:
    """This process's cluster client (thread-safe: a pool per node)."""
    if _Cluster.client is None:
        with _Cluster.lock:
            if _Cluster.client is None:
                nodes = [
                    ClusterNode(host, int(port))
                    for host, _, port in (n.rpartition(":") for n in settings.REDIS_CLUSTER_NODES)
                ]
                with outages_as_connection_errors():  # it learns the slots from a node at once
                    _Cluster.client = ShopCluster(
                        startup_nodes=nodes,
                        socket_timeout=settings.REDIS_CLUSTER_SOCKET_TIMEOUT,
                        socket_connect_timeout=settings.REDIS_CLUSTER_SOCKET_TIMEOUT,
                        max_connections=settings.REDIS_MAX_CONNECTIONS,
                    )
    return _Cluster.client


def customer_redis() -> Redis | RedisCluster:
    """The client for per-customer keys (plain commands; scripts go through run_script(alias=CARTS))."""
    return cluster() if clustered() else get_redis_connection("default")


def forget_client(**_) -> None:
    """The next call opens a new client (the nodes changed)."""
    client, _Cluster.client = _Cluster.client, None
    if client is not None:
        client.close()


def _after_fork() -> None:  # a child opens its own sockets, under a lock no other thread holds
    _Cluster.client, _Cluster.lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


@receiver(setting_changed)
def _nodes_changed(*, setting: str, **_) -> None:
    if setting == "REDIS_CLUSTER_NODES":
        forget_client()
