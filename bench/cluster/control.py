"""The local cluster the drills run on (bench.cluster): scripts/cluster.sh started, stopped and a node killed, in
the bench shoppers' environment; API calls through its HAProxy; and what the drills read of its parts: HAProxy's
view of the nodes, the Redis primary the Sentinels name (killed and started again), the carts' Redis Cluster (a
shard's primary killed and started again, slots moved), a node's processes, the relay's leader and the nodes' logs,
the gate set from the database."""

import http.client
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import connection
from django_redis import get_redis_connection

from bench import LIFTED
from bench import harness as h
from core.sharding import cluster as carts_cluster
from core.sharding import forget_client

LB = "http://127.0.0.1:8000"
CLUSTER = [str(h.ROOT / "scripts" / "cluster.sh")]
RUN = h.ROOT / ".run" / "cluster"
REDIS_CLUSTER = [str(h.ROOT / "scripts" / "redis_cluster.sh")]
CARTS_CLUSTER = ["7000", "3", "1"]  # as scripts/cluster.sh starts it
CARTS_RUN = h.ROOT / ".run" / "redis-cluster-7000"
# The nodes' environment: bench shoppers hold many unpaid orders, all from one address (the bench's).
NODE_ENV = {
    **LIFTED,
    "RATE_LIMIT_CHECKOUT": "1000000/min",
    "RATE_LIMIT_CART_WRITE": "1000000/min",
    "ORDER_EXPIRY_INTERVAL_SECONDS": "5",
    "OUTBOX_PURGE_INTERVAL_SECONDS": "20",
}


def cluster(*args: str, env: dict | None = None) -> None:
    subprocess.run([*CLUSTER, *args], check=True, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)


def restart_cluster() -> None:
    """With topics and consumer groups of this run's own (a group's members from an earlier run are
    not waited for), in the bench's environment too."""
    run = f"bench.cluster.{int(time.time())}"
    topics = {
        "KAFKA_ORDERS_TOPIC": f"{run}.orders",
        "KAFKA_CHECKOUT_TOPIC": f"{run}.checkout",
        "KAFKA_CONSUMER_GROUP_PREFIX": f"{run}.",
    }
    os.environ.update(topics)
    for name, value in topics.items():
        setattr(settings, name, value)
    NODE_ENV.update(topics)
    cluster("stop")
    cluster("start", env=NODE_ENV)
    use_carts_cluster()


def use_carts_cluster() -> None:
    """This process reads and writes carts where the nodes do: on the carts' Redis Cluster."""
    nodes = subprocess.run([*REDIS_CLUSTER, "nodes", *CARTS_CLUSTER], check=True, capture_output=True)
    os.environ["REDIS_CLUSTER_NODES"] = nodes.stdout.decode().strip()
    settings.REDIS_CLUSTER_NODES = os.environ["REDIS_CLUSTER_NODES"].split(",")
    forget_client()


def shard_nodes() -> list[dict]:
    """The carts' cluster as one of its nodes sees it: per node its id, port, role and the primary it follows."""
    for port in range(7000, 7006):
        try:
            listing = subprocess.run(
                ["redis-cli", "-p", str(port), "cluster", "nodes"], check=True, capture_output=True, timeout=2
            ).stdout.decode()
        except (subprocess.SubprocessError, OSError):
            continue
        if listing.strip():
            break
    nodes = []
    for line in listing.splitlines():
        node_id, address, flags, follows, *_ = line.split()
        nodes.append(
            {
                "id": node_id,
                "port": int(address.split("@")[0].rpartition(":")[2]),
                "primary": "master" in flags and "fail" not in flags,
                "failed": "fail" in flags,
                "follows": follows,
            }
        )
    return nodes


def shard_primary_of(key: str) -> int:
    """The port of the primary serving `key`'s slot now."""
    return carts_cluster().get_node_from_key(key).port


def kill_shard_primary(port: int) -> None:
    """kill -9 of a cluster node (scripts/redis_cluster.sh writes each one's pid file)."""
    subprocess.run(["kill", "-9", (CARTS_RUN / f"redis-{port}.pid").read_text().strip()], check=True)


def start_shard_node(port: int) -> None:
    """A killed cluster node back: it rejoins from its nodes file, as a replica of the one promoted."""
    subprocess.run([*REDIS_CLUSTER, "start-node", str(port), CARTS_CLUSTER[0]], check=True)


def move_slots(*, source: str, target: str, slots: int) -> float:
    """redis-cli --cluster reshard: `slots` slots moved from node `source` to `target` (ids); seconds taken."""
    started = time.monotonic()
    subprocess.run(
        [
            "redis-cli",
            "--cluster",
            "reshard",
            "127.0.0.1:7000",
            "--cluster-from",
            source,
            "--cluster-to",
            target,
            "--cluster-slots",
            str(slots),
            "--cluster-yes",
        ],
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def stop_cluster() -> None:
    """Every part stopped, and the run's topics deleted."""
    cluster("stop")
    h.delete_topics(
        [NODE_ENV["KAFKA_ORDERS_TOPIC"], NODE_ENV["KAFKA_ORDERS_TOPIC"] + ".dlq", NODE_ENV["KAFKA_CHECKOUT_TOPIC"]]
    )


def api(shopper, method: str, path: str, body: bytes | None = None, *, timeout: float = 30, headers=None) -> int:
    """The status of one API call through HAProxy as `shopper`; 0 for no answer, or one cut off by a kill."""
    request = urllib.request.Request(
        f"{LB}{path}", data=body, method=method, headers={"Authorization": f"Token {shopper.token}", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, http.client.HTTPException):
        return 0


def haproxy_states() -> dict[str, str]:
    """node name -> UP / DOWN, as HAProxy's stats page says."""
    with urllib.request.urlopen("http://127.0.0.1:8404/;csv", timeout=2) as response:
        rows = response.read().decode().splitlines()
    head = rows[0].lstrip("# ").split(",")
    states = {}
    for row in rows[1:]:
        fields = dict(zip(head, row.split(","), strict=False))
        if fields.get("pxname") == "nodes" and fields.get("svname", "").startswith("node"):
            states[fields["svname"]] = fields["status"]
    return states


def redis_primary() -> int:
    """The port of the primary the Sentinels name now."""
    host, port = get_redis_connection("default").connection_pool.get_master_address()
    return int(port)


def kill_redis_primary() -> int:
    """kill -9 of the primary the Sentinels name now; its port."""
    port = redis_primary()
    subprocess.run(["kill", "-9", (RUN / f"redis-{port}.pid").read_text().strip()], check=True)
    return port


def start_redis(port: int) -> None:
    """A Redis killed by kill_redis_primary back, as a replica of the new primary (the Sentinels reconfigure it)."""
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(RUN),
            "--pidfile",
            str(RUN / f"redis-{port}.pid"),
            "--logfile",
            str(RUN / f"redis-{port}.log"),
        ],
        check=True,
    )


def redis_cpu(redis) -> float:
    info = redis.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def sync_gate(sku: str) -> None:
    """The runbook's step after a fault: the gate set from the database (no sale is running)."""
    subprocess.run(
        [str(h.VENV_BIN / "python"), "manage.py", "flash_sale_sync", sku],
        check=True,
        cwd=h.ROOT,
        stdout=subprocess.DEVNULL,
    )


def node_process(node: int, command: str) -> int | None:
    """The pid of node `node`'s process running `command` (scripts/cluster.sh marks each with SHOP_NODE)."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            argv = (environ.parent / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"manage.py", command.encode()] and f"SHOP_NODE={node}".encode() in (
                environ.read_bytes().split(b"\0")
            ):
                return int(environ.parent.name)
        except OSError:  # gone, or not ours
            continue
    return None


def relay_leader(*, wait_for: str, seconds: float) -> str:
    """The process holding the relay's leader lock (its application_name) once it is `wait_for`'s and its run
    has a RelayRun row (it has events to produce), or whoever holds it after `seconds`."""
    from outbox.relay.sql import RELAY_LOCK_KEY

    deadline, holder, running = time.monotonic() + seconds, "", False
    with connection.cursor() as cursor:
        while time.monotonic() < deadline and not (holder.endswith(wait_for) and running):
            cursor.execute(
                "SELECT a.application_name, EXISTS (SELECT FROM outbox_relay_runs) FROM pg_locks l "
                "JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.granted",
                [RELAY_LOCK_KEY >> 32, RELAY_LOCK_KEY & 0xFFFFFFFF],
            )
            holder, running = cursor.fetchone() or ("", False)
    return holder


def relay_recoveries() -> list[int]:
    """Per run a relay found unfinished in the nodes' logs: how many of its events Kafka had already."""
    found = []
    for log in sorted(RUN.glob("node*.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = re.search(r"did not finish; (\d+) of its events were in Kafka already", line)
            if match:
                found.append(int(match[1]))
    return found
