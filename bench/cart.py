"""Cart endpoints against /healthz on a gunicorn of its own (bench/README.md).

python -m bench.cart --rounds 3 --duration 5
python -m bench.cart --cluster     then the same on a local Redis Cluster of 3 primaries (scripts/redis_cluster.sh)

Each Redis's (each shard's) share of the calls and its CPU per request are printed."""

import os
import subprocess
import sys

from django.conf import settings
from django_redis import get_redis_connection
from redis import Redis

from bench import harness as h
from cart.storage import cart_key
from core.sharding import customer_redis, forget_client

CLUSTER_BASE, SHARDS = 7200, 3
BALANCE = 0.2  # issue 48: each shard's share of the calls within 20 % of the others'

GOAL = 0.6
SHOPPERS, PRODUCTS, LINES = 200, 50, 5  # shoppers bench-00001..., products BENCH-0001..., lines in each cart


def build_specs(shoppers, skus) -> dict[str, list[h.Spec]]:
    """Each shopper cycles through its own LINES SKUs with changing quantities: every PUT writes, carts keep LINES."""
    auth = [{"Authorization": f"Token {s.token}"} for s in shoppers]
    own = [[skus[(i * LINES + j) % len(skus)] for j in range(LINES)] for i in range(len(shoppers))]
    json_auth = [{**a, "Content-Type": "application/json"} for a in auth]
    put = [
        h.Spec("PUT", f"/api/cart/items/{own[i][r % LINES]}", json_auth[i], b'{"quantity": %d}' % (1 + (r * 7 + i) % 9))
        for r in range(LINES * 2)
        for i in range(len(shoppers))
    ]
    carts = [{sku: 1 + (i + j) % 3 for j, sku in enumerate(own[i])} | h.SHIPS for i in range(len(shoppers))]
    h.fill_carts([(s.user_id, cart) for s, cart in zip(shoppers, carts, strict=True)])
    return {
        "GET /healthz": [h.Spec("GET", "/healthz")],
        "PUT /api/cart/items/{sku}": put,
        "GET /api/cart": [h.Spec("GET", "/api/cart", a) for a in auth],
    }


class Shards(tuple):
    """Per shard (commands, Redis CPU seconds), read from INFO; subtracting gives a run's share."""

    def __sub__(self, other):
        return Shards((a[0] - b[0], a[1] - b[1]) for a, b in zip(self, other, strict=True))


def shard_probe(shards: list[Redis]):
    def probe() -> Shards:
        readings = []
        for shard in shards:
            stats = shard.info("commandstats")
            calls = sum(stat["calls"] for name, stat in stats.items() if name != "cmdstat_info")  # not the probe's
            cpu = shard.info("cpu")
            readings.append((calls, cpu["used_cpu_user"] + cpu["used_cpu_sys"]))
        return Shards(readings)

    return probe


def on_cluster() -> tuple[dict, list[Redis]]:
    script = str(h.ROOT / "scripts" / "redis_cluster.sh")
    subprocess.run([script, "start", str(CLUSTER_BASE), str(SHARDS), "0"], check=True)
    nodes = subprocess.run([script, "nodes", str(CLUSTER_BASE), str(SHARDS), "0"], check=True, capture_output=True)
    os.environ["REDIS_CLUSTER_NODES"] = nodes.stdout.decode().strip()
    settings.REDIS_CLUSTER_NODES = os.environ["REDIS_CLUSTER_NODES"].split(",")
    forget_client()
    return {"REDIS_CLUSTER_NODES": os.environ["REDIS_CLUSTER_NODES"]}, [
        Redis(port=CLUSTER_BASE + i) for i in range(SHARDS)
    ]


def shard_columns() -> dict:
    def share(run) -> str:
        calls = [c for c, _ in run.probe]
        return "/".join(f"{100 * c / max(sum(calls), 1):.0f}" for c in calls)

    def cpu(run) -> str:
        return "/".join(f"{1000 * s / max(run.answered, 1):.3f}" for _, s in run.probe)

    return {"calls per shard %": share, "Redis CPU ms/req per shard": cpu}


def main(argv=None) -> int:
    args = h.parse(
        argv,
        __doc__,
        *h.ENDPOINTS,
        check=(False, f"exit 1 when a ratio is below {GOAL}"),
        cluster=(False, "after one Redis, the same on a local Redis Cluster of 3 primaries"),
    )
    h.setup()
    skus = [f"BENCH-{i:04d}" for i in range(1, PRODUCTS + 1)]
    h.ensure_products(skus, 500_000)
    h.ensure_shipping_and_tax(skus)  # each cart ships, and is taxed
    shoppers = h.ensure_shoppers(SHOPPERS, prefix="bench-")
    print("carts on one Redis (REDIS_URL)")
    code = measure(args, shoppers, skus, {}, [get_redis_connection("default")])
    if args.cluster:
        print(f"\ncarts on a Redis Cluster of {SHARDS} primaries (:{CLUSTER_BASE}-{CLUSTER_BASE + SHARDS - 1})")
        env, shards = on_cluster()
        try:
            code = max(code, measure(args, shoppers, skus, env, shards, balance=True))
        finally:
            script = str(h.ROOT / "scripts" / "redis_cluster.sh")
            subprocess.run([script, "stop", str(CLUSTER_BASE), str(SHARDS), "0"], check=False)
    return code


def measure(args, shoppers, skus, env: dict, shards: list[Redis], *, balance: bool = False) -> int:
    env["RATE_LIMIT_CART_WRITE"] = "1000000000/min"  # the throttle's Redis call still runs, but no PUT is a 429
    try:
        summary = h.measure_endpoints(args, build_specs(shoppers, skus), env=env, probe=shard_probe(shards))
    finally:
        customer_redis().delete(*[cart_key(s.user_id) for s in shoppers])
    code = h.print_endpoints(summary, args, "cart/healthz", GOAL, extra=shard_columns())
    if balance:
        shares = [[c for c, _ in run.probe] for name, run in summary.items() if name != "GET /healthz"]
        spread = max(max(calls) / max(min(calls), 1) - 1 for calls in shares)
        met = spread <= BALANCE
        print(
            f"shard balance: the busiest shard's calls over the idlest's - 1 = {spread:.0%} (goal <= {BALANCE:.0%}): "
            f"{h.verdict(met, 'met', 'NOT met')}"
        )
        code = max(code, 1 if args.check and not met else 0)
    return code


if __name__ == "__main__":
    sys.exit(main())
