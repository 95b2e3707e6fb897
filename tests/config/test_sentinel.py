"""Redis through Sentinel (config/settings.py redis_cache): a real primary, a
replica and a Sentinel on ports of the test's own; the primary killed with
SIGKILL, the same cache client follows the promoted replica without a restart."""

import shutil
import socket
import subprocess
import time

import pytest
import redis as redis_py
from django.core.cache import caches
from django_redis import get_redis_connection

from config.settings import redis_cache
from tests.helpers import free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not shutil.which("redis-server"), reason="no redis-server")]


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


@pytest.fixture
def sentinel_redis(tmp_path):
    primary, replica, sentinel = free_port(), free_port(), free_port()
    base = [
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--repl-diskless-load",
        "on-empty-db",
    ]
    for name in ("primary", "replica"):
        (tmp_path / name).mkdir()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {sentinel}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor t 127.0.0.1 {primary} 1\nsentinel down-after-milliseconds t 500\n"
        "sentinel failover-timeout t 3000\n"
    )
    processes = {
        "primary": subprocess.Popen(
            [*base, "--port", str(primary), "--dir", str(tmp_path / "primary")], stdout=subprocess.DEVNULL
        ),
        "replica": subprocess.Popen(
            [
                *base,
                "--port",
                str(replica),
                "--dir",
                str(tmp_path / "replica"),
                "--replicaof",
                "127.0.0.1",
                str(primary),
            ],
            stdout=subprocess.DEVNULL,
        ),
    }
    try:
        assert wait_until(lambda: answers(primary) and answers(replica), 10), "Redis did not start"
        direct = redis_py.Redis(port=primary)
        synced = lambda: direct.info("replication").get("slave0", {}).get("state") == "online"  # noqa: E731
        assert wait_until(synced, 10), "the replica did not do its first sync"
        # The Sentinel last: its first look at the primary finds the replica.
        processes["sentinel"] = subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL)
        assert wait_until(lambda: answers(sentinel), 10), "the Sentinel did not start"
        watcher = redis_py.Redis(port=sentinel)

        def knows_both() -> bool:
            state = watcher.sentinel_master("t")
            return bool(state.get("is_master") and not state.get("is_sdown") and state.get("num-slaves", 0) >= 1)

        assert wait_until(knows_both, 10), "the Sentinel does not know the primary and its replica"
        yield {"processes": processes, "sentinels": [("127.0.0.1", sentinel)], "primary": primary}
    finally:
        for process in processes.values():
            process.kill()
            process.wait()


def test_the_cache_follows_a_failover_without_a_restart(sentinel_redis, settings):
    through_sentinel = redis_cache("redis://ignored:1/3", timeout=3, sentinels=sentinel_redis["sentinels"], master="t")
    assert through_sentinel["LOCATION"] == "redis://t/3"  # the host is the master's name, the DB kept
    settings.CACHES = {**settings.CACHES, "through_sentinel": through_sentinel}
    redis = get_redis_connection("through_sentinel")
    assert redis.connection_pool.get_master_address()[1] == sentinel_redis["primary"]
    redis.set("cart:1", "kept")
    assert redis.wait(1, 2000) == 1  # the replica has it

    sentinel_redis["processes"]["primary"].kill()  # SIGKILL: no goodbye
    deadline, value = time.monotonic() + 20, None
    while time.monotonic() < deadline:
        try:
            value = redis.get("cart:1")
            redis.set("after", "written")
            break
        except Exception:  # ConnectionError until a Sentinel promotes the replica
            time.sleep(0.1)
    assert value == b"kept" and redis.get("after") == b"written"
    assert redis.connection_pool.get_master_address()[1] != sentinel_redis["primary"]
    caches["through_sentinel"].close()
