#!/usr/bin/env bash
# The shop as several nodes, on this machine (docs/operations.md, "Scaling out"):
# HAProxy on :8000 in front of two nodes, each its own gunicorn (:8001, :8002)
# with its own Celery worker and beat, relay, consumers and queue writer; a Redis
# primary (:6390) with a replica (:6391) and three Sentinels (:26390-26392) for
# the gate, queue mode, caches and Celery; a Redis Cluster of 3 primaries + 3
# replicas (:7000-7005, scripts/redis_cluster.sh) for carts, addresses and rate
# limits; the shared PostgreSQL and Kafka broker (scripts/services.sh).
#
#   scripts/cluster.sh start     start what is down, then print where each part runs
#   scripts/cluster.sh stop      stop every part (the shared services stay up)
#   scripts/cluster.sh kill-node N   kill -9 every process of node N (a drill)
#   scripts/cluster.sh start-node N  start node N again
set -euo pipefail

cd "$(dirname "$0")/.."
DIR=.run/cluster
PY=${PY:-.venv/bin/python}
LB_PORT=${CLUSTER_PORT:-8000}
PRIMARY=6390
REPLICA=6391
SENTINELS=(26390 26391 26392)
NODES=(1 2)
MASTER=shop
export REDIS_SENTINELS="127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392"
export REDIS_SENTINEL_MASTER=$MASTER
CARTS_CLUSTER=(7000 3 1)  # base port, primaries, replicas of each
export REDIS_CLUSTER_NODES=${REDIS_CLUSTER_NODES:-$(scripts/redis_cluster.sh nodes "${CARTS_CLUSTER[@]}")}
export DEBUG=${DEBUG:-1}

say() { printf '[cluster] %s\n' "$*"; }
fail() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }
answers() { "$PY" -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()' "$1" 2>/dev/null; }
closed() { ! answers "$1"; }
wait_for() {  # wait_for SECONDS COMMAND...
  local seconds=$1; shift
  for _ in $(seq 1 $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
node_port() { echo $((8000 + $1)); }

haproxy_installed() {
  command -v haproxy >/dev/null && return 0
  say "installing Debian's haproxy package"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } >/dev/null \
    || fail "could not install haproxy (apt-get install haproxy)"
}

redis_node() {  # redis_node PORT [replicaof-port]
  local port=$1
  answers "$port" && return 0
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --maxmemory "${REDIS_MAXMEMORY:-512mb}" --maxmemory-policy volatile-lru \
    --dir "$PWD/$DIR" --pidfile "$PWD/$DIR/redis-$port.pid" --logfile "$PWD/$DIR/redis-$port.log" \
    ${2:+--replicaof 127.0.0.1 $2}
  wait_for 10 answers "$port" || fail "Redis on :$port did not start ($DIR/redis-$port.log)"
}

sentinel() {  # sentinel PORT
  local port=$1 conf="$PWD/$DIR/sentinel-$1.conf"
  answers "$port" && return 0
  # A Sentinel rewrites its file as it learns the replicas and failovers: a new one each start.
  cat >"$conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $PWD/$DIR/sentinel-$port.pid
logfile $PWD/$DIR/sentinel-$port.log
dir $PWD/$DIR
sentinel monitor $MASTER 127.0.0.1 $PRIMARY 2
sentinel down-after-milliseconds $MASTER ${SENTINEL_DOWN_AFTER_MS:-1000}
sentinel failover-timeout $MASTER 5000
sentinel parallel-syncs $MASTER 1
EOF
  redis-server "$conf" --sentinel
  wait_for 10 answers "$port" || fail "Sentinel on :$port did not start ($DIR/sentinel-$port.log)"
}

haproxy_up() {
  answers "$LB_PORT" && return 0
  cat >"$DIR/haproxy.cfg" <<EOF
global
    maxconn 8000
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    # A node that refuses the connection (killed): the request goes to the other one.
    retries 2
    option redispatch
frontend shop
    bind 127.0.0.1:$LB_PORT
    default_backend nodes
backend nodes
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
$(for n in "${NODES[@]}"; do echo "    server node$n 127.0.0.1:$(node_port "$n") check"; done)
listen stats
    bind 127.0.0.1:8404
    stats enable
    stats uri /
EOF
  haproxy -D -f "$DIR/haproxy.cfg" -p "$DIR/haproxy.pid" || fail "haproxy did not start"
}

start_node() {  # start_node N: honcho with the Procfile, in a process group of its own
  local n=$1 port
  port=$(node_port "$n")
  answers "$port" && return 0
  mkdir -p "$DIR/node$n/metrics"
  rm -f "$DIR/node$n/metrics"/*
  # SHOP_NODE marks every process of the node (honcho gives each its own session).
  SHOP_NODE=$n WEB_BIND=127.0.0.1:$port BEAT_SCHEDULE=$DIR/node$n/celerybeat-schedule \
    PROMETHEUS_MULTIPROC_DIR=$PWD/$DIR/node$n/metrics \
    setsid .venv/bin/honcho start -f Procfile >"$DIR/node$n.log" 2>&1 </dev/null &
  echo $! >"$DIR/node$n.pid"
}

node_pids() {  # every process of node N, by the SHOP_NODE=N in its environment
  grep -lzx "SHOP_NODE=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true
}

stop_node() {  # stop_node N [KILL]: gracefully (honcho stops its processes), then whatever is left, killed
  local n=$1 pids
  if [ "${2:-}" != KILL ]; then
    stop_pidfile "$DIR/node$n.pid"
    for _ in $(seq 1 50); do [ -z "$(node_pids "$n")" ] && break; sleep 0.2; done
  fi
  pids=$(node_pids "$n")
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
  rm -f "$DIR/node$n.pid"
}

stop_pidfile() {  # stop_pidfile FILE [SIGNAL]: the process group the file names
  local file=$1 signal=${2:-TERM}
  [ -f "$file" ] || return 0
  local pid
  pid=$(cat "$file")
  kill -"$signal" -- "-$pid" 2>/dev/null || kill -"$signal" "$pid" 2>/dev/null || true
  rm -f "$file"
}

case "${1:-start}" in
  start)
    haproxy_installed
    scripts/services.sh start
    mkdir -p "$DIR"
    redis_node $PRIMARY
    redis_node $REPLICA $PRIMARY
    for port in "${SENTINELS[@]}"; do sentinel "$port"; done
    scripts/redis_cluster.sh start "${CARTS_CLUSTER[@]}" >/dev/null
    # As make run prepares them (the demo's logins exist only where DEBUG is on).
    DEBUG=1 "$PY" manage.py migrate --noinput >/dev/null
    DEBUG=1 "$PY" manage.py seed_demo >/dev/null
    DEBUG=1 "$PY" manage.py kafka_topics >/dev/null
    for n in "${NODES[@]}"; do start_node "$n"; done
    haproxy_up
    wait_for 90 curl -sf "http://127.0.0.1:$LB_PORT/readyz" || fail "no node became ready (see $DIR/node*.log)"
    cat <<EOF

  The shop runs as two nodes (scripts/cluster.sh stop, or make cluster-stop, stops them).
    Load balancer  http://127.0.0.1:$LB_PORT/api/  (HAProxy; its stats: http://127.0.0.1:8404/)
$(for n in "${NODES[@]}"; do echo "    Node $n         http://127.0.0.1:$(node_port "$n")/  web, worker, beat, relay, consumers, writer (log: $DIR/node$n.log)"; done)
    Redis          primary :$PRIMARY, replica :$REPLICA, Sentinels :${SENTINELS[*]} (master name "$MASTER"): the gate, queue mode, Celery
    Redis Cluster  3 primaries + 3 replicas on :7000-7005: carts, addresses, rate limits (REDIS_CLUSTER_NODES)
    PostgreSQL, Kafka: shared, as for make run (scripts/services.sh)
EOF
    ;;
  stop)
    for n in "${NODES[@]}"; do stop_node "$n"; done
    stop_pidfile "$DIR/haproxy.pid"
    # Sentinels first (they would fail the primary over as it goes), and each port closed
    # before the next start: a Sentinel left over with an older view of who is primary would
    # split the writes between two servers.
    for port in "${SENTINELS[@]}" $REPLICA $PRIMARY; do
      pkill -f "redis-server 127.0.0.1:$port( |$)" 2>/dev/null || true
      wait_for 5 closed "$port" || pkill -9 -f "redis-server 127.0.0.1:$port( |$)" 2>/dev/null || true
      wait_for 2 closed "$port" || fail "something still answers on :$port"
      rm -f "$DIR/redis-$port.pid" "$DIR/sentinel-$port.pid"
    done
    scripts/redis_cluster.sh stop "${CARTS_CLUSTER[@]}"
    say "stopped"
    ;;
  kill-node) stop_node "$2" KILL ;;
  start-node) start_node "$2" ;;
  *) fail "usage: scripts/cluster.sh start|stop|kill-node N|start-node N" ;;
esac
