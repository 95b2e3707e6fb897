"""A flood of guest carts into a Redis that is full: with the deployment's policy
(maxmemory, volatile-lru) Redis evicts keys with a TTL, the carts, and never the
flash-sale gate's counters or the queue's records that have none. On a Redis of
the test's own, so that the shared one is never filled."""

import shutil
import subprocess
import time

import pytest
import redis as redis_py
from django.core.cache import caches

from cart import storage
from core.hotcache import GENERATION_KEY, bump_generation, hot_cache
from inventory import gate
from orders.services import queue_admission
from tests.helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def small_redis(settings, tmp_path):
    """redis-server with 2 MB of memory and the deployment's policy; this process's caches use it."""
    port = free_port()
    server = subprocess.Popen(
        [
            shutil.which("redis-server") or "/usr/bin/redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory",
            "2mb",
            "--maxmemory-policy",
            "volatile-lru",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    client = redis_py.Redis(port=port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis_py.ConnectionError:
                assert time.monotonic() < deadline, "the test's Redis did not start"
                time.sleep(0.1)
        url = f"redis://127.0.0.1:{port}/0"
        settings.CACHES = {name: {**config, "LOCATION": url} for name, config in settings.CACHES.items()}
        hot_cache.clear()
        yield client
    finally:
        for name in settings.CACHES:
            caches[name].close()
        hot_cache.clear()
        server.kill()
        server.wait(10)


def test_a_guest_cart_flood_evicts_carts_and_never_the_gate_or_the_queue(small_redis):
    gate.set_counter(sku="FLASH", remaining=100, reset_customers=True)
    small_redis.zadd(queue_admission.pending_key("FLASH"), {1: time.time()})
    small_redis.sadd(queue_admission.SKUS_KEY, "FLASH")
    bump_generation()  # the hot-cache generation exists once something changed
    generation = hot_cache.ensure_generation()

    written = 0
    while small_redis.info("stats")["evicted_keys"] < 500:
        digest = f"flood-{written:08d}"
        storage.guest_write_line(
            digest=digest,
            sku=f"SKU-{written % 50:04d}-" + "x" * 40,
            quantity=1,
            generation=generation,
            address="192.0.2.1",
            create=True,
        )
        written += 1
        assert written < 200_000, "Redis never filled up"

    assert small_redis.get(gate.remaining_key("FLASH")) == b"100"
    assert small_redis.zcard(queue_admission.pending_key("FLASH")) == 1
    assert small_redis.get(GENERATION_KEY) == generation.encode()
    print(f"\n{written:,} guest carts written, {small_redis.info('stats')['evicted_keys']:,} keys evicted")
