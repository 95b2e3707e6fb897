"""Drills on the local cluster (scripts/cluster.sh: HAProxy on :8000, two nodes, Redis with Sentinel, carts on a
Redis Cluster of 3 + 3).

    python -m bench.cluster                  every drill, in turn
    python -m bench.cluster --drills sale,node

  sale   a flash sale of --units through HAProxy, shoppers over both nodes: direct, then queue mode
         (a writer per node): exactly --units orders, 0 x 5xx
  node   node 1 killed (kill -9, every process; its relay first, while it leads a run) mid-sale: how long
         until HAProxy stops sending to it, what failed meanwhile; each failed checkout retried with its key
         through HAProxy, so on node 2 (its order created once); every event in Kafka once and every consumer
         effect applied once, node 2 taking the partitions
  redis  the Redis primary killed mid-sale: how long until the shop serves again (a replica promoted, no
         restart), what was refused meanwhile; no oversell; gate and database equal after flash_sale_sync;
         carts written a second before the kill kept (they live on the carts' cluster: the shard drill kills that)
  shard  a primary of the carts' Redis Cluster killed mid-sale, under cart traffic: how long until its carts are
         served again (its replica promoted), cart failures only within that window, writes acknowledged before
         the kill kept (witness shoppers stop writing at the kill; what a lost write's age was), no oversell
  reshard  --slots slots moved between two primaries (redis-cli --cluster reshard) under cart traffic: no error
         a shopper sees, every cart as last written
  beats  both nodes' beats for --beat-minutes: expiry, publishing and purging done once each, by counts

The bench (re)starts the cluster with the bench shoppers' limits lifted and stops it at the end. The cluster's
control is bench/cluster/control.py, the drills bench/cluster/drills.py."""

import json

from bench import harness as h
from bench.cluster.control import RUN, restart_cluster, stop_cluster
from bench.cluster.drills import DRILLS, PREFIX, SKU


def parse_args(argv=None):
    p = h.parser(
        __doc__,
        units=(1000, "units on sale"),
        shoppers=(3000, "shoppers, one unit each"),
        clients=(48, "requests in flight"),
        drills=("sale,node,redis,shard,reshard,beats", "which drills, comma-separated"),
        slots=(2000, "slots the reshard drill moves"),
        beat_minutes=(10.0, "how long both beats run in the beats drill"),
    )
    p.prog = "python -m bench.cluster"
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    with h.lock_or_exit("cluster"):
        restart_cluster()
        results, checks = {}, []
        try:
            for name in args.drills.split(","):
                checks += DRILLS[name](args, results)
        finally:
            h.delete_orders(h.user_ids(PREFIX))
            h.end_sale(SKU)
            stop_cluster()
        RUN.mkdir(parents=True, exist_ok=True)
        (RUN / "results.json").write_text(json.dumps(results, indent=2, default=str))
        return 0 if h.print_checks(checks, "cluster drills") else 1
