#!/usr/bin/env bash
# A local Redis Cluster for carts (REDIS_CLUSTER_NODES, core/sharding.py):
# PRIMARIES primaries and REPLICAS replicas of each, on ports from BASE up,
# nothing kept on disk, files under .run/redis-cluster-BASE/.
#
#   scripts/redis_cluster.sh start [BASE [PRIMARIES [REPLICAS]]]   (default 7000 3 1)
#   scripts/redis_cluster.sh stop  [BASE [PRIMARIES [REPLICAS]]]
#   scripts/redis_cluster.sh nodes [BASE [PRIMARIES [REPLICAS]]]   prints REDIS_CLUSTER_NODES
#   scripts/redis_cluster.sh start-node PORT [BASE]   one node back (a drill killed it): it rejoins from its nodes file
#
# start is safe to run again: a cluster already answering on BASE is kept.
set -euo pipefail

cd "$(dirname "$0")/.."
BASE=${2:-7000}
PRIMARIES=${3:-3}
REPLICAS=${4:-1}
COUNT=$((PRIMARIES * (1 + REPLICAS)))
DIR=$PWD/.run/redis-cluster-$BASE
PORTS=$(seq "$BASE" $((BASE + COUNT - 1)))

say() { printf '[redis-cluster] %s\n' "$*"; }
fail() { printf '[redis-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

cluster_ok() { redis-cli -p "$BASE" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

node() {  # node PORT: one cluster node, from its nodes file when it has one
  redis-server --daemonize yes --bind 127.0.0.1 --port "$1" --cluster-enabled yes \
    --cluster-config-file "$DIR/nodes-$1.conf" --cluster-node-timeout "${REDIS_CLUSTER_NODE_TIMEOUT_MS:-2000}" \
    --save "" --appendonly no --dir "$DIR" --dbfilename "dump-$1.rdb" \
    --logfile "$DIR/redis-$1.log" --pidfile "$DIR/redis-$1.pid" \
    || fail "redis-server on $1 did not start; see $DIR/redis-$1.log."
}

start() {
  if cluster_ok; then return 0; fi
  command -v redis-server >/dev/null || fail "redis-server is missing: apt-get install redis-server."
  mkdir -p "$DIR"
  for port in $PORTS; do
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    rm -f "$DIR/nodes-$port.conf" "$DIR/dump-$port.rdb" "$DIR/dump.rdb"  # a replica's full sync writes one
    node "$port"
  done
  for port in $PORTS; do
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  # shellcheck disable=SC2046
  redis-cli --cluster create $(for port in $PORTS; do printf '127.0.0.1:%s ' "$port"; done) \
    --cluster-replicas "$REPLICAS" --cluster-yes >"$DIR/create.log" 2>&1 \
    || fail "redis-cli --cluster create failed; see $DIR/create.log."
  for _ in $(seq 100); do cluster_ok && break; sleep 0.1; done
  cluster_ok || fail "the cluster on $BASE is not ok after 10 s."
  say "$PRIMARIES primaries + $((PRIMARIES * REPLICAS)) replicas on 127.0.0.1:$BASE-$((BASE + COUNT - 1))"
}

stop() {
  for port in $PORTS; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; done
}

nodes() {
  for port in $PORTS; do printf '127.0.0.1:%s\n' "$port"; done | paste -sd, -
}

case "${1:-start}" in
  start-node) BASE=${3:-7000}; DIR=$PWD/.run/redis-cluster-$BASE; node "$2" ;;
  start) start ;;
  stop) stop ;;
  nodes) nodes ;;
  *) fail "usage: $0 start|stop|nodes [BASE [PRIMARIES [REPLICAS]]], or start-node PORT [BASE]" ;;
esac
