"""The flash-sale drill (issue 7, "The drill - what it must show").

    .venv/bin/python bench/flash_sale.py                        # 50,000 attempts, 5,000 shoppers, 1,000 units
    .venv/bin/python bench/flash_sale.py --attempts 50000 --shoppers 5000 --stock 1000 --concurrency 64 \\
        --workers 2 --threads 4 --rate-limit 8/min

Against `gunicorn config.wsgi` (bench/_harness.py, DEBUG off) and a Celery worker, both started here
and stopped at the end, on the development database and Redis:

 1. seeds SKU FLASH-DRILL with --stock units (inventory.services.flash_sales.seed_flash_sale: the
    stock through the ledger, the Redis gate counter on commit), creates --shoppers shoppers
    flash-00001... with API tokens in bulk (harness ensure_shoppers) and gives each a one-line cart
    {FLASH-DRILL: 1} straight in Redis (pipelined);
 2. GET /healthz, --healthz-requests requests (after 2,000 unmeasured): the reference rate, measured
    again just before and just after the refused phase (5), whose rate is compared with these two;
 3. THE SALE: --attempts POST /api/orders, each with its own Idempotency-Key, over --concurrency
    keep-alive connections, with a progress bar. Shoppers arrive in waves of --wave (500): within a
    wave, round after round in a new random order, each shopper tries attempts/shoppers (10) times,
    a few seconds apart. RATE_LIMIT_CHECKOUT = --rate-limit (8/min) in gunicorn's environment, so
    the last 2 of the 10 attempts of each shopper get 429 as long as a wave lasts under a minute
    (with --wave 0 every shopper's attempts are spread over the whole sale: on a machine where the
    sale lasts minutes, no shopper then reaches 8 a minute). Winners who try again find their cart
    emptied by their order: 422 cart_empty;
 4. reads the outcome: orders in the database, DB available/reserved, Redis gate counter;
 5. REFUSED PHASE: the checkout rate limit windows of the shoppers are reset, then shoppers without
    an order (their carts still hold the SKU) send --refused-requests more checkouts (at most the
    rate limit each): all should be 409 sold_out. This gives the refused rate, compared with the
    /healthz rate around it (goal >= 0.5), by requests/s and by gunicorn CPU time per request;
 6. /metrics before and after (PROMETHEUS_MULTIPROC_DIR is a fresh directory, so one scrape adds
    up all workers): deltas of shop_orders_created_total and shop_checkout_refusals_total;
 7. cleans up: the drill's orders, items and outbox events are deleted and their reservations given
    back, the flash sale ended, carts, rate-limit windows and replay markers deleted. The product and
    the shoppers stay, for the next run; a run that was killed is cleaned up by the next one.

SQL issued per request is measured two ways:
  - exactly, per request: gunicorn serves config.wsgi's application wrapped (in a module written to
    a temp directory, loaded with --pythonpath) by a WSGI middleware that counts the statements the
    request thread sends through Django's cursors (connection.execute_wrapper) and returns the count
    in a response header X-Bench-SQL: "total,token,flash" (token: the DRF token lookup of
    CachedTokenAuthentication; flash: the flash-sale list gated_skus() loads once per process).
    The client tallies it by status. (--no-sql-probe serves config.wsgi unwrapped.)
  - independently, from PostgreSQL: pg_stat_database xact_commit + xact_rollback of the database
    (every statement outside a transaction is one transaction) over the refused phase plus a 11 s
    wait for the backends to flush their statistics, minus the same count over an idle window of
    the same length just after (background: this script's Celery worker, and whatever else uses
    the database). A rough cross-check on a shared database; --no-pg-stat skips it (saves ~40 s).

The load client is wrk (when installed) with a Lua script generated here: every request has its own
Idempotency-Key and X-Request-ID; the server echoes X-Request-ID, which gives each response its own
latency, status, error code and SQL count (written to a file per wrk thread). The harness's
run_load() cycles through a fixed list and reports only overall figures, so it is not used. Without
wrk (or with --client python), a threaded http.client keep-alive client does the same, slower.
--py-spy records every gunicorn worker (py-spy --gil) during the refused phase and prints where
their Python CPU time went (the figures of such a run are lower: py-spy competes for the CPUs).

Exit status 1 when a check is missed (the list at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import math
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as h  # noqa: E402 - the repository root must be importable first

SKU = "FLASH-DRILL"
PREFIX = "flash-"  # drill shoppers: flash-00001...
PG_FLUSH_SECONDS = 11.0  # PostgreSQL 15 backends flush idle statistics every 10 s at the latest
RATIO_GOAL = 0.5


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, default=50_000, help="checkout attempts in the sale (default 50000)")
    p.add_argument("--shoppers", type=int, default=5_000, help="distinct shoppers (default 5000)")
    p.add_argument("--stock", type=int, default=1_000, help="units of the flash-sale SKU (default 1000)")
    p.add_argument("--price", type=int, default=4_999, help="price in minor units (default 4999)")
    p.add_argument("--concurrency", type=int, default=64, help="open connections / requests in flight (default 64)")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    p.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker (default 4)")
    p.add_argument(
        "--rate-limit",
        default="8/min",
        help="RATE_LIMIT_CHECKOUT for gunicorn (default 8/min: with 10 attempts a shopper, some 429s)",
    )
    p.add_argument(
        "--wave",
        type=int,
        default=500,
        help="shoppers arrive in waves of this many, each making its attempts within its wave (default 500; "
        "0: one wave of everybody, every shopper's attempts spread over the whole sale)",
    )
    p.add_argument("--healthz-requests", type=int, default=10_000, help="GET /healthz per measurement (default 10000)")
    p.add_argument(
        "--refused-requests",
        type=int,
        default=20_000,
        help="checkouts of the refused phase (default 20000; at most the rate limit per shopper)",
    )
    p.add_argument("--client", choices=["auto", "wrk", "python"], default="auto", help="load generator")
    p.add_argument("--client-threads", type=int, default=1, help="wrk threads (default 1: the machine has 2 cores)")
    p.add_argument("--no-sql-probe", action="store_true", help="serve config.wsgi unwrapped (no per-request SQL count)")
    p.add_argument("--no-pg-stat", action="store_true", help="skip the pg_stat_database cross-check")
    p.add_argument("--py-spy", action="store_true", help="profile the gunicorn workers during the refused phase")
    p.add_argument("--py-spy-dir", help="with --py-spy: keep the raw profiles in this directory")
    p.add_argument("--no-cleanup", action="store_true", help="leave the drill's orders, sale and carts in place")
    p.add_argument("--seed", type=int, default=7, help="random seed of the shoppers' order")
    args = p.parse_args(argv)
    if args.shoppers < 1 or args.attempts < args.shoppers or args.stock < 1 or args.concurrency < 1:
        p.error("need --shoppers >= 1, --attempts >= --shoppers, --stock >= 1, --concurrency >= 1")
    if args.stock >= args.shoppers:
        p.error("--stock must be below --shoppers (somebody has to be refused)")
    return args


# --- Data ---------------------------------------------------------------------------------------


def drill_customer_ids() -> list[int]:
    from django.contrib.auth import get_user_model

    return list(get_user_model().objects.filter(username__regex=rf"^{PREFIX}[0-9]{{5}}$").values_list("id", flat=True))


def cleanup(customer_ids: list[int], *, end_sale: bool) -> dict[str, int]:
    """Delete the drill shoppers' orders (their items and outbox events too) and give back the stock
    their open orders reserved; delete their carts, checkout rate-limit windows and replay markers;
    end the flash sale. Running it twice is a no-op."""
    from django.db import connection, transaction
    from django_redis import get_redis_connection

    from cart.storage import cart_key
    from inventory import gate
    from inventory.models import FlashSale, Stock
    from inventory.services.flash_sales import end_flash_sale
    from orders.models import Order, OrderItem, OrderStatus
    from outbox.models import OutboxEvent

    orders, items = Order._meta.db_table, OrderItem._meta.db_table
    stock, outbox = Stock._meta.db_table, OutboxEvent._meta.db_table
    holding = [str(OrderStatus.PENDING_PAYMENT), str(OrderStatus.PAID)]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT customer_id, idempotency_key FROM {orders} WHERE customer_id = ANY(%s)", [customer_ids])
        markers = [gate.replay_key(cid, key) for cid, key in cursor.fetchall()]
        cursor.execute(
            f"""
            UPDATE {stock} AS s SET available = s.available + r.q, reserved = s.reserved - r.q
            FROM (SELECT i.sku, SUM(i.quantity) AS q FROM {items} i JOIN {orders} o ON o.id = i.order_id
                  WHERE o.customer_id = ANY(%s) AND o.status = ANY(%s) GROUP BY i.sku) AS r
            WHERE s.sku = r.sku
            """,
            [customer_ids, holding],
        )
        cursor.execute(
            f"DELETE FROM {outbox} WHERE aggregate_type = 'order' AND aggregate_id IN "
            f"(SELECT id::text FROM {orders} WHERE customer_id = ANY(%s))",
            [customer_ids],
        )
        events = cursor.rowcount
        cursor.execute(
            f"DELETE FROM {items} WHERE order_id IN (SELECT id FROM {orders} WHERE customer_id = ANY(%s))",
            [customer_ids],
        )
        cursor.execute(f"DELETE FROM {orders} WHERE customer_id = ANY(%s)", [customer_ids])
        cursor.execute("DELETE FROM order_pending_counts WHERE customer_id = ANY(%s)", [customer_ids])
        deleted = cursor.rowcount
    redis = get_redis_connection("default")
    keys = [cart_key(cid) for cid in customer_ids] + [f"rate:checkout:user:{cid}" for cid in customer_ids]
    for start in range(0, len(keys), 5000):
        redis.delete(*keys[start : start + 5000])
    for start in range(0, len(markers), 5000):
        gate.connection().delete(*markers[start : start + 5000])
    ended = False
    if end_sale and FlashSale.objects.filter(product_id=SKU).exists():
        end_flash_sale(sku=SKU)
        ended = True
    return {"orders": deleted, "events": events, "markers": len(markers), "ended": ended}


def fill_carts(shoppers) -> None:
    from django.conf import settings
    from django_redis import get_redis_connection

    from cart.storage import cart_key

    redis = get_redis_connection("default")
    for start in range(0, len(shoppers), 1000):
        pipe = redis.pipeline(transaction=False)
        for s in shoppers[start : start + 1000]:
            key = cart_key(s.user_id)
            pipe.delete(key, f"rate:checkout:user:{s.user_id}")
            pipe.hset(key, SKU, 1)
            pipe.expire(key, settings.CART_TTL_SECONDS)
        pipe.execute()


def reset_rate_limits(shoppers) -> None:
    from django_redis import get_redis_connection

    keys = [f"rate:checkout:user:{s.user_id}" for s in shoppers]
    redis = get_redis_connection("default")
    for start in range(0, len(keys), 5000):
        redis.delete(*keys[start : start + 5000])


def sale_state(customer_ids: list[int]) -> dict:
    from django.db import connection

    from inventory import gate
    from inventory.models import Stock
    from orders.models import Order, OrderItem

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT o.customer_id, count(*) FROM {Order._meta.db_table} o JOIN {OrderItem._meta.db_table} i "
            "ON i.order_id = o.id WHERE o.customer_id = ANY(%s) AND i.sku = %s GROUP BY o.customer_id",
            [customer_ids, SKU],
        )
        per_customer = dict(cursor.fetchall())
    stock = Stock.objects.filter(product_id=SKU).values("available", "reserved").first() or {}
    counter = gate.counters(skus=[SKU])[SKU]
    return {
        "orders": sum(per_customer.values()),
        "winners": set(per_customer),
        "max_per_customer": max(per_customer.values(), default=0),
        "available": stock.get("available"),
        "reserved": stock.get("reserved"),
        "counter": counter["remaining"],
        "gate_refused": counter["refused"],
    }


def pg_xacts() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(cursor.fetchone()[0])


# --- Servers ------------------------------------------------------------------------------------

# Written to a temp directory and served instead of config.wsgi: the same application, plus the
# number of SQL statements each request's thread sent through Django, in a response header.
SQL_PROBE = """
from django.db import connection

from config.wsgi import application as django_application
from inventory.models import FlashSale
from knox.models import AuthToken

TOKEN_TABLE = '"%s"' % AuthToken._meta.db_table
FLASH_TABLE = '"%s"' % FlashSale._meta.db_table


class _Counter:
    __slots__ = ("total", "token", "flash")

    def __init__(self):
        self.total = self.token = self.flash = 0

    def __call__(self, execute, sql, params, many, context):
        self.total += 1
        if TOKEN_TABLE in sql:
            self.token += 1
        elif FLASH_TABLE in sql:
            self.flash += 1
        return execute(sql, params, many, context)


def application(environ, start_response):
    counter = _Counter()

    def counting_start_response(status, headers, exc_info=None):
        headers.append(("X-Bench-SQL", "%d,%d,%d" % (counter.total, counter.token, counter.flash)))
        return start_response(status, headers, exc_info)

    with connection.execute_wrapper(counter):
        return django_application(environ, counting_start_response)
"""


class DrillGunicorn(h.Gunicorn):
    """The harness's gunicorn, optionally serving the SQL-counting wrapper of config.wsgi."""

    def __init__(self, *, probe_dir: str | None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.probe_dir = probe_dir

    def command(self) -> list[str]:
        cmd = super().command()
        if self.probe_dir:
            cmd[1] = "flash_drill_sql_probe:application"
            cmd += ["--pythonpath", self.probe_dir]
        return cmd


class CeleryWorker:
    """`.venv/bin/celery -A config worker --concurrency 1 --loglevel WARNING`, in its own process
    group (stopped with it), killed by the kernel if this script dies (PR_SET_PDEATHSIG)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = {**os.environ, **env}
        self.env.pop("PYTEST_VERSION", None)
        self.log = tempfile.NamedTemporaryFile(prefix="bench-celery-", suffix=".txt", delete=False)
        self.proc: subprocess.Popen | None = None

    def start(self) -> CeleryWorker:
        self.proc = subprocess.Popen(
            [str(h.ROOT / ".venv" / "bin" / "celery"), "-A", "config", "worker", "--concurrency", "1",
             "--loglevel", "WARNING", "--hostname", f"flash-drill-{os.getpid()}@%h"],
            cwd=h.ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=h._die_with_parent,
        )  # fmt: skip
        import atexit

        atexit.register(self.stop)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # warm shutdown of the worker and its pool child
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # the pool child is in the same group: make sure nothing of it is left
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.log.close()
            if proc.returncode in (0, -signal.SIGTERM):
                os.unlink(self.log.name)


# --- Load ---------------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    client: str
    sent: int
    seconds: float
    errors: int
    records: list[tuple[int, float, str, tuple[int, int, int] | None]]  # status, latency ms, code, sql
    cpu_seconds: float = 0.0
    generation_moves: int = 0  # the hot-cache generation in Redis moved this often during the phase

    @property
    def answered(self) -> int:
        return len(self.records)

    @property
    def rps(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return self.cpu_seconds * 1000 / self.answered if self.answered else 0.0

    def by(self, predicate) -> list[tuple[int, float, str, tuple[int, int, int] | None]]:
        return [r for r in self.records if predicate(r)]


@dataclass
class Plan:
    """Request k (1-based) of a phase: GET /healthz, or POST /api/orders by tokens[who[k-1]]."""

    name: str
    count: int
    tokens: list[str] = field(default_factory=list)
    who: list[int] = field(default_factory=list)  # index into tokens, per request
    key_prefix: str = ""

    @property
    def checkout(self) -> bool:
        return bool(self.tokens)


_LUA = r"""
local ffi = require("ffi")
ffi.cdef[[ typedef struct { long tv_sec; long tv_nsec; } fsd_timespec;
           int clock_gettime(int, fsd_timespec *); ]]
local ts = ffi.new("fsd_timespec")
local function now_us() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3 end

local N = %(count)d
local CHECKOUT = %(checkout)s
local PREFIX = "%(prefix)s"
local HOST = "%(host)s"
local OUT = "%(out)s"
local tokens = {%(tokens)s}
local who = {%(who)s}
local threads, counter = {}, 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local stride, first, limit, issued, answered, sent, out, started, elapsed, verifying
function init(args)
  -- wrk calls request() once on thread 0 before the run, only to check what it returns: that
  -- request is never sent, so it must not take a request number.
  verifying = (id == 0)
  stride = tonumber(args[1])
  first = id + 1
  limit = 0
  for k = first, N, stride do limit = limit + 1 end
  issued, answered, sent = 0, 0, {}
  out = io.open(OUT .. id, "w")
  started, elapsed = nil, 0
end

function request()
  local k
  if verifying then
    verifying = false
    k = first
  else
    if issued >= limit then return "" end  -- all sent: the connection stays idle
    k = first + issued * stride
    issued = issued + 1
  end
  local rid = PREFIX .. k
  local req
  if CHECKOUT then
    req = "POST /api/orders HTTP/1.1\r\nHost: " .. HOST .. "\r\nAuthorization: Token " .. tokens[who[k]] ..
          "\r\nIdempotency-Key: " .. rid .. "\r\nX-Request-ID: " .. rid .. "\r\nContent-Length: 0\r\n\r\n"
  else
    req = "GET /healthz HTTP/1.1\r\nHost: " .. HOST .. "\r\nX-Request-ID: " .. rid .. "\r\n\r\n"
  end
  if issued == 0 then return req end  -- the verification call
  local t = now_us()
  if started == nil then started = t end
  sent[rid] = t
  return req
end

function response(status, headers, body)
  local rid = headers["X-Request-ID"]
  local t0 = rid and sent[rid]
  if not t0 then return end
  sent[rid] = nil
  local t = now_us()
  local code = "-"
  if status >= 400 then code = string.match(body or "", '"code"%%s*:%%s*"([^"]*)"') or "?" end
  out:write(status, " ", string.format("%%.0f", t - t0), " ", code, " ", headers["X-Bench-SQL"] or "-", "\n")
  answered = answered + 1
  if answered %% 250 == 0 then
    out:flush()
    io.write("P 250\n")
    io.flush()
  end
  if answered == limit then
    elapsed = t - started
    wrk.thread:set("elapsed", elapsed)
    out:close()
    io.write("P ", answered %% 250, "\nBENCH_THREAD_DONE\n")
    io.flush()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local longest = 0
  for _, t in ipairs(threads) do
    local e = t:get("elapsed") or 0
    if e > longest then longest = e end
  end
  local e = summary.errors
  io.write(string.format('BENCH_JSON {"requests": %%d, "duration_us": %%d, "elapsed_us": %%d, "connect": %%d, ' ..
    '"read": %%d, "write": %%d, "timeout": %%d}\n', summary.requests, summary.duration, longest,
    e.connect, e.read, e.write, e.timeout))
end
"""


def _parse_records(paths) -> list:
    records = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            for line in Path(path).read_text().splitlines():
                parts = line.split(" ")
                if len(parts) != 4:
                    continue
                status, micros, code, sql = parts
                counts = tuple(int(x) for x in sql.split(",")) if sql != "-" else None
                records.append((int(status), int(micros) / 1000, code, counts))
    return records


def run_wrk(server, plan: Plan, concurrency: int, threads: int, progress) -> Phase:
    import json

    threads = max(1, min(threads, concurrency, plan.count))
    workdir = tempfile.mkdtemp(prefix="bench-flash-wrk-")
    try:
        script = _LUA % {
            "count": plan.count,
            "checkout": "true" if plan.checkout else "false",
            "prefix": plan.key_prefix,
            "host": server.base_url.removeprefix("http://"),
            "out": f"{workdir}/out-",
            "tokens": ",".join(f'"{t}"' for t in plan.tokens),
            "who": ",".join(str(i + 1) for i in plan.who),
        }
        script_path = Path(workdir) / "drill.lua"
        script_path.write_text(script)
        cap = max(120, math.ceil(plan.count / 100))
        cmd = ["wrk", "-t", str(threads), "-c", str(max(concurrency, threads)), "-d", f"{cap}s",
               "--timeout", "10s", "-s", str(script_path), server.base_url + "/", "--", str(threads)]  # fmt: skip
        cpu0 = server.cpu_seconds()
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue = queue.Queue()

        def reader():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=reader, daemon=True).start()
        output, finished, last_progress, stopped = [], 0, time.monotonic(), False
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                if not stopped and time.monotonic() - last_progress > 20:  # stalled (lost requests?)
                    print(f"\n{plan.name}: no response for 20 s, stopping wrk", file=sys.stderr)
                    proc.send_signal(signal.SIGINT)
                    stopped = True
                continue
            if line is None:
                break
            if line.startswith("P "):
                progress.update(int(line.split()[1]))
                last_progress = time.monotonic()
                continue
            output.append(line)
            if line.startswith("BENCH_THREAD_DONE"):
                finished += 1
                if finished == threads and not stopped:
                    proc.send_signal(signal.SIGINT)  # wrk stops sleeping and reports
                    stopped = True
        proc.wait(timeout=60)
        wall = time.perf_counter() - began
        cpu = server.cpu_seconds() - cpu0
        text = "".join(output)
        match = re.search(r"^BENCH_JSON (.*)$", text, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"wrk failed ({proc.returncode}):\n{text}")
        data = json.loads(match.group(1))
        records = _parse_records(Path(workdir).glob("out-*"))
        seconds = data["elapsed_us"] / 1e6 if data["elapsed_us"] and len(records) == plan.count else wall
        errors = data["connect"] + data["read"] + data["write"] + data["timeout"]
        return Phase(plan.name, f"wrk -t{threads} -c{concurrency}", plan.count, seconds, errors, records, cpu)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_python(server, plan: Plan, concurrency: int, progress) -> Phase:
    """Fallback: one thread and one keep-alive http.client connection per request in flight."""
    host, port = server.base_url.removeprefix("http://").split(":")
    tickets = itertools.count(1)
    records: list = []
    lock = threading.Lock()
    errors = [0]
    gate = threading.Barrier(concurrency + 1)

    def worker() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        mine = []
        gate.wait()
        while (k := next(tickets)) <= plan.count:
            rid = f"{plan.key_prefix}{k}"
            if plan.checkout:
                method, path = "POST", "/api/orders"
                headers = {"Authorization": f"Token {plan.tokens[plan.who[k - 1]]}", "Idempotency-Key": rid,
                           "X-Request-ID": rid, "Content-Length": "0"}  # fmt: skip
            else:
                method, path, headers = "GET", "/healthz", {"X-Request-ID": rid}
            began = time.perf_counter()
            try:
                conn.request(method, path, headers=headers)
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException):
                with lock:
                    errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
                continue
            ms = (time.perf_counter() - began) * 1000
            code = "-"
            if response.status >= 400:
                m = re.search(rb'"code"\s*:\s*"([^"]*)"', body)
                code = m.group(1).decode() if m else "?"
            sql = response.getheader("X-Bench-SQL")
            mine.append((response.status, ms, code, tuple(int(x) for x in sql.split(",")) if sql else None))
            if len(mine) % 100 == 0:
                with lock:
                    progress.update(100)
        conn.close()
        with lock:
            records.extend(mine)
            progress.update(len(mine) % 100)

    cpu0 = server.cpu_seconds()
    workers = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for w in workers:
        w.start()
    gate.wait()
    began = time.perf_counter()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - began
    return Phase(plan.name, f"python x{concurrency}", plan.count, seconds, errors[0], records,
                 server.cpu_seconds() - cpu0)  # fmt: skip


def cache_generation() -> int:
    from django_redis import get_redis_connection

    from config.hotcache import GENERATION_KEY

    return int(get_redis_connection("default").get(GENERATION_KEY) or 0)


def run_phase(server, plan: Plan, args, client: str) -> Phase:
    from tqdm import tqdm

    before = cache_generation()
    with tqdm(total=plan.count, desc=plan.name, unit="req", file=sys.stderr, dynamic_ncols=True, leave=True) as bar:
        if client == "wrk":
            phase = run_wrk(server, plan, args.concurrency, args.client_threads, bar)
        else:
            phase = run_python(server, plan, args.concurrency, bar)
    phase.generation_moves = cache_generation() - before
    if phase.generation_moves:
        print(f"warning: the hot-cache generation moved {phase.generation_moves} time(s) during {plan.name} (another "
              "process changed products, tokens or users): every worker then reloaded tokens and the flash-sale "
              "list from PostgreSQL", file=sys.stderr)  # fmt: skip
    return phase


# --- py-spy -------------------------------------------------------------------------------------


class Profiler:
    """py-spy on every gunicorn worker with --gil: only the thread holding the GIL is sampled, i.e.
    where the workers' Python CPU time goes (a CPU-bound server on 2 cores: CPU is what limits it)."""

    def __init__(self, pids: list[int]) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-flash-pyspy-")
        self.procs = []
        py_spy = h.ROOT / ".venv" / "bin" / "py-spy"
        for pid in pids:
            out = f"{self.dir}/gil-{pid}.txt"
            proc = subprocess.Popen(
                [str(py_spy), "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "--nonblocking",
                 "--gil", "--output", out, "--duration", "600"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            self.procs.append((out, proc))
        time.sleep(1.0)  # attach

    def stop(self) -> list[str]:
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for _, proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return [out for out, _ in self.procs]

    def report(self, files: list[str], keep: str | None = None) -> None:
        try:
            self._report(files)
        finally:
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                for path in files:
                    with contextlib.suppress(FileNotFoundError):
                        shutil.copy(path, keep)
                print(f"  raw profiles (collapsed stacks, py-spy --format raw) kept in {keep}")
            shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def _report(paths: list[str]) -> None:
        stacks: list[tuple[list[str], int]] = []
        token_lookup = other_threads = 0
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                for line in Path(path).read_text().splitlines():
                    stack, _, count = line.rpartition(" ")
                    if not stack or not count.isdigit():
                        continue
                    frames = [_short(f) for f in stack.split(";")]
                    if not any(f.startswith("ThreadWorker.handle_request ") for f in frames):
                        other_threads += int(count)  # the poller accepting and reading, the master
                        continue
                    if any(
                        f.startswith("TokenAuthentication.authenticate_credentials (rest_framework") for f in frames
                    ):
                        token_lookup += int(count)  # a token read from PostgreSQL: the cache was cold
                        continue
                    stacks.append((frames, int(count)))
        total = sum(n for _, n in stacks)
        if not total:
            print("py-spy: no samples of request-serving threads")
            return
        print(f"py-spy --gil on the gunicorn workers during the refused phase (where the Python CPU goes): "
              f"{total:,} samples serving requests, plus {token_lookup:,} inside token lookups in PostgreSQL "
              f"(cold token cache, left out below) and {other_threads:,} outside request handling (gunicorn's "
              f"poller and accept loop)")  # fmt: skip

        def inclusive(prefix: str) -> int:
            return sum(n for frames, n in stacks if any(f.startswith(prefix) for f in frames))

        def children(parent: str, top: int = 8) -> None:
            kids: Counter = Counter()
            own = 0
            for frames, n in stacks:
                i = next((i for i, f in enumerate(frames) if f.startswith(parent)), None)
                if i is None:
                    continue
                if i + 1 < len(frames):
                    kids[frames[i + 1]] += n
                else:
                    own += n
            whole = sum(kids.values()) + own
            print(f"  {whole / total:6.1%}  {parent.strip()}  (self {own / total:.1%}), of which:")
            for name, n in kids.most_common(top):
                if n / total >= 0.003:
                    print(f"            {n / total:6.1%}  {name}")

        children("ThreadWorker.handle_request ", 6)
        children("BaseHandler._get_response ", 5)
        children("APIView.dispatch ", 6)
        children("APIView.initial ", 6)
        children("place_order ", 5)
        redis = inclusive("Script.__call__ ") + sum(
            n
            for frames, n in stacks
            if not any(f.startswith("Script.__call__ ") for f in frames)
            and any(f.startswith("Redis.execute_command ") for f in frames)
        )
        shares = [
            ("Redis calls in redis-py (1 round-trip a refusal: cart, rate limit and gate in one script)", redis),
            ("DRF content negotiation", inclusive("APIView.perform_content_negotiation ")),
            ("URL resolving", inclusive("BaseHandler.resolve_request ")),
            ("MessageMiddleware (nothing for an API request)", inclusive("MessageMiddleware.")),
            ("SessionMiddleware", inclusive("SessionMiddleware.")),
            ("request_started/finished signals", inclusive("Signal.send ")),
            ("prometheus_client", sum(map(inclusive, ("MetricWrapperBase.labels ", "Counter.inc ", "Histogram.")))),
            ("the SQL probe itself", inclusive("application (") - inclusive("WSGIHandler.__call__ ")),
        ]  # fmt: skip
        print("  some totals (inclusive):")
        for label, n in shares:
            print(f"    {n / total:6.1%}  {label}")


def _short(frame: str) -> str:
    """'func (path/to/module.py:123)' -> 'func (module.py)' without the line, site-packages cut."""
    m = re.match(r"^(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    name, path = m.groups()
    path = re.sub(r"^.*site-packages/", "", path)
    path = path.replace(str(h.ROOT) + "/", "")
    return f"{name} ({path})"


# --- Report -------------------------------------------------------------------------------------


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[max(0, math.ceil(p / 100 * len(values)) - 1)]


def _lat(records) -> str:
    ms = [r[1] for r in records]
    if not ms:
        return "-"
    return f"p50 {_pct(ms, 50):.1f} ms, p99 {_pct(ms, 99):.1f} ms"


def _sql(records) -> str:
    with_counts = [r[3] for r in records if r[3] is not None]
    if not with_counts:
        return "not measured"
    total = sum(c[0] for c in with_counts)
    token = sum(c[1] for c in with_counts)
    flash = sum(c[2] for c in with_counts)
    other = total - token - flash
    requests_with = sum(1 for c in with_counts if c[0])
    return (
        f"{total:,} statements in {requests_with:,} of {len(with_counts):,} requests "
        f"(token lookups {token:,}, flash-sale list {flash:,}, anything else {other:,})"
    )


def _sql_other(records) -> int | None:
    with_counts = [r[3] for r in records if r[3] is not None]
    if not with_counts:
        return None
    return sum(c[0] - c[1] - c[2] for c in with_counts)


def _sql_total(records) -> int | None:
    with_counts = [r[3] for r in records if r[3] is not None]
    return sum(c[0] for c in with_counts) if with_counts else None


def print_statuses(phase: Phase) -> None:
    by_status = Counter((r[0], r[2]) for r in phase.records)
    print(f"  {'status':<8}{'code':<22}{'count':>9}   latency / SQL")
    for (status, code), count in sorted(by_status.items()):
        records = phase.by(lambda r, s=status, c=code: r[0] == s and r[2] == c)
        print(f"  {status:<8}{code:<22}{count:>9,}   {_lat(records)}; SQL: {_sql(records)}")


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            with contextlib.suppress(ValueError):
                values[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return values


def fetch_metrics(server) -> dict[tuple[str, str], float]:
    status, body = h.http_call(server.base_url, h.Spec("GET", "/metrics"))
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status} {body[:200]!r}")
    return parse_metrics(body.decode())


# --- Main ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    h.setup_django()
    from django.conf import settings
    from django.db import connection

    from config.throttling import parse_rate
    from inventory.services.flash_sales import seed_flash_sale

    client = args.client
    if client == "auto":
        client = "wrk" if h.wrk_available() else "python"
        if client == "python":
            print("wrk not found (apt-get install -y wrk): the Python client is used", file=sys.stderr)
    rate_count, rate_period = parse_rate(args.rate_limit)
    run_id = uuid.uuid4().hex[:8]
    rng = random.Random(args.seed)
    ok = True

    db = connection.settings_dict
    print(f"flash-sale drill {run_id}: database {db['NAME']}@{db['HOST']}:{db['PORT']}, "
          f"Redis {settings.CACHES['default']['LOCATION']} (gate {settings.CACHES['gate']['LOCATION']})")  # fmt: skip

    # --- data ---
    t0 = time.perf_counter()
    leftovers = cleanup(drill_customer_ids(), end_sale=False)
    if leftovers["orders"]:
        print(f"removed leftovers of an earlier run: {leftovers['orders']} orders, {leftovers['events']} events")
    seed_flash_sale(sku=SKU, stock=args.stock, price=args.price, name="Flash drill item")  # counter set on commit
    shoppers = h.ensure_shoppers(args.shoppers, prefix=PREFIX)
    customer_ids = [s.user_id for s in shoppers]
    fill_carts(shoppers)
    state0 = sale_state(customer_ids)
    print(f"data ready in {time.perf_counter() - t0:.1f} s: {SKU} seeded with {args.stock} units (DB available "
          f"{state0['available']}, reserved {state0['reserved']}, gate counter {state0['counter']}), "
          f"{len(shoppers):,} shoppers {shoppers[0].username}..{shoppers[-1].username} with tokens, "
          f"each with the cart {{{SKU}: 1}}")  # fmt: skip
    if state0["available"] != args.stock or state0["counter"] != args.stock or state0["reserved"] != 0:
        print("warning: the SKU did not start at available = stock, reserved = 0, counter = stock", file=sys.stderr)

    # --- servers ---
    metrics_dir = tempfile.mkdtemp(prefix="bench-flash-metrics-")
    probe_dir = None
    if not args.no_sql_probe:
        probe_dir = tempfile.mkdtemp(prefix="bench-flash-probe-")
        Path(probe_dir, "flash_drill_sql_probe.py").write_text(SQL_PROBE)
    env = {**h.PRODUCTION_LIKE_ENV, "RATE_LIMIT_CHECKOUT": args.rate_limit, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    h.warn_if_busy()
    phases: dict[str, Phase] = {}
    pg = None
    profile_files = profiler = None
    try:
        celery = CeleryWorker(env).start()
        with DrillGunicorn(probe_dir=probe_dir, workers=args.workers, threads=args.threads, env=env) as server:
            print(f"gunicorn {server.base_url}: {args.workers} workers x {args.threads} threads, DEBUG off, "
                  f"RATE_LIMIT_CHECKOUT={args.rate_limit}, PROMETHEUS_MULTIPROC_DIR={metrics_dir}, "
                  f"{'SQL probe on' if probe_dir else 'no SQL probe'}; celery worker pid {celery.proc.pid}; "
                  f"client {client}, {args.concurrency} connections")  # fmt: skip
            status, body = h.http_call(
                server.base_url, h.Spec("GET", "/api/cart", {"Authorization": f"Token {shoppers[-1].token}"})
            )
            if status != 200 or SKU.encode() not in body:
                raise SystemExit(f"GET /api/cart of {shoppers[-1].username}: {status} {body[:300]!r}")
            metrics_before = fetch_metrics(server)

            def plan_checkouts(name: str, people, count: int, wave: int) -> Plan:
                """`count` checkouts spread evenly over `people`, wave after wave of `wave` shoppers; within
                a wave, round after round, each round a new random order of the wave's shoppers."""
                people = list(people)
                rng.shuffle(people)
                index = {s.user_id: i for i, s in enumerate(people)}
                base, extra = divmod(count, len(people))
                tries = {s.user_id: base + (1 if i < extra else 0) for i, s in enumerate(people)}
                order = []
                for start in range(0, len(people), wave):
                    group = people[start : start + wave]
                    for r in range(max(tries[s.user_id] for s in group)):
                        batch = [s for s in group if tries[s.user_id] > r]
                        rng.shuffle(batch)
                        order += batch
                return Plan(name, count, [s.token for s in people], [index[s.user_id] for s in order],
                            f"fd{run_id}-{name}-")  # fmt: skip

            def healthz(name: str, tag: str) -> Phase:
                return run_phase(
                    server, Plan(name, args.healthz_requests, key_prefix=f"fd{run_id}-{tag}-"), args, client
                )

            # warm-up of the connections and /healthz only (a sale starts with cold caches)
            run_phase(server, Plan("warm-up /healthz", 2000, key_prefix=f"fd{run_id}-w-"), args, client)
            phases["healthz0"] = healthz("GET /healthz (before the sale)", "h0")
            phases["sale"] = run_phase(
                server, plan_checkouts("sale", shoppers, args.attempts, args.wave or len(shoppers)), args, client
            )

            state = sale_state(customer_ids)
            losers = [s for s in shoppers if s.user_id not in state["winners"]]
            per_loser = min(rate_count, max(1, math.ceil(args.refused_requests / max(1, len(losers)))))
            refused_count = min(args.refused_requests, per_loser * len(losers))
            reset_rate_limits(losers)
            phases["healthz1"] = healthz("GET /healthz (before the refused phase)", "h1")
            if not args.no_pg_stat:
                xacts0 = pg_xacts()
                pg_t0 = time.monotonic()
            if args.py_spy:
                profiler = Profiler(server.worker_pids())
            phases["refused"] = run_phase(
                server, plan_checkouts("refused", losers, refused_count, len(losers)), args, client
            )
            if profiler:
                profile_files = profiler.stop()
            phases["healthz2"] = healthz("GET /healthz (after the refused phase)", "h2")
            if not args.no_pg_stat:
                print(f"pg_stat_database: waiting {PG_FLUSH_SECONDS:.0f} s for the backends' statistics, then an "
                      "idle window of the same length...", file=sys.stderr)  # fmt: skip
                time.sleep(PG_FLUSH_SECONDS)
                xacts1 = pg_xacts()
                window = time.monotonic() - pg_t0
                time.sleep(window)
                xacts2 = pg_xacts()
                pg = {"window": window, "busy": xacts1 - xacts0, "idle": xacts2 - xacts1}
            metrics_after = fetch_metrics(server)
            celery_alive = celery.alive()
    finally:
        if "celery" in locals():
            celery.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if probe_dir:
            shutil.rmtree(probe_dir, ignore_errors=True)
        if not args.no_cleanup:
            done = cleanup(drill_customer_ids(), end_sale=True)

    # --- report ---
    sale, refused = phases["sale"], phases["refused"]
    hz0, hz1, hz2 = phases["healthz0"], phases["healthz1"], phases["healthz2"]
    print()
    print(f"THE SALE: {sale.answered:,} of {sale.sent:,} checkout attempts answered in {sale.seconds:.1f} s = "
          f"{sale.rps:,.0f} requests/s ({sale.client}); {sale.errors} socket errors/timeouts; "
          f"gunicorn CPU {sale.cpu_ms:.2f} ms/request")  # fmt: skip
    print_statuses(sale)
    created = sale.by(lambda r: r[0] == 201)
    r409 = sale.by(lambda r: r[0] == 409)
    r429 = sale.by(lambda r: r[0] == 429)
    r5xx = sale.by(lambda r: r[0] >= 500)
    others = sale.by(lambda r: r[0] not in (201, 409, 429) and r[0] < 500)
    print(f"  201 created {len(created):,}; 409 refused {len(r409):,}; 429 rate-limited {len(r429):,}; "
          f"5xx {len(r5xx):,}; other {len(others):,} ({dict(Counter((r[0], r[2]) for r in others))})")  # fmt: skip
    print(f"  latency of refused (409): {_lat(r409)}; of admitted (201): {_lat(created)}; of 429: {_lat(r429)}")
    print(f"  SQL of refused (409) requests: {_sql(r409)}")
    print(f"  SQL of 429 requests: {_sql(r429)}")
    print(
        "  (token lookups: CachedTokenAuthentication keeps a token for TOKEN_CACHE_SECONDS = 60 s in each worker"
        " process, so a shopper's first request on each worker, and the first after 60 s, reads its token from"
        f" PostgreSQL: at most {len(shoppers):,} shoppers x {args.workers} workers a minute, whatever the status)"
    )

    checks = []

    def check(label: str, good: bool, detail: str) -> None:
        nonlocal ok
        ok &= good
        checks.append((label, good, detail))

    check("orders created (DB) == stock", state["orders"] == args.stock,
          f"{state['orders']:,} orders for {SKU} in the DB (201 responses: {len(created):,}; "
          f"at most {state['max_per_customer']} per shopper)")  # fmt: skip
    check("5xx == 0", not r5xx and not refused.by(lambda r: r[0] >= 500), f"{len(r5xx)} in the sale, "
          f"{len(refused.by(lambda r: r[0] >= 500))} in the refused phase")  # fmt: skip
    check("429s occur but do not dominate", 0 < len(r429) < sale.answered / 2, f"{len(r429):,} of {sale.answered:,}")
    check(f"DB available/reserved == 0/{args.stock}", (state["available"], state["reserved"]) == (0, args.stock),
          f"{state['available']}/{state['reserved']}")  # fmt: skip
    check("Redis gate counter == 0", state["counter"] == 0, f"{state['counter']} (gate refusals counted in "
          f"Redis: {state['gate_refused']:,})")  # fmt: skip

    print()
    print(f"REFUSED PHASE (after the sale, rate-limit windows reset, {len(losers):,} shoppers without an order, "
          f"{per_loser} checkouts each at most): {refused.answered:,} answered in {refused.seconds:.1f} s = "
          f"{refused.rps:,.0f} requests/s; gunicorn CPU {refused.cpu_ms:.2f} ms/request")  # fmt: skip
    print_statuses(refused)
    ref409 = refused.by(lambda r: r[0] == 409)
    for label, phase in (("before the sale", hz0), ("just before the refused phase", hz1), ("just after it", hz2)):
        print(f"GET /healthz {label}: {phase.rps:,.0f} requests/s, CPU {phase.cpu_ms:.2f} ms/request, "
              f"{_lat(phase.records)}, non-200: {len(phase.by(lambda r: r[0] != 200))}")  # fmt: skip
    hz = statistics.mean([hz1.rps, hz2.rps])
    ref_rps = len(ref409) / refused.seconds if refused.seconds else 0.0
    ratio = ref_rps / hz if hz else 0.0
    cpu_ratio = statistics.mean([hz1.cpu_ms, hz2.cpu_ms]) / refused.cpu_ms if refused.cpu_ms else 0.0
    check(f"refused req/s / healthz req/s >= {RATIO_GOAL}", ratio >= RATIO_GOAL,
          f"{ref_rps:,.0f} / {hz:,.0f} (mean of the two /healthz runs around it) = {ratio:.2f}; by gunicorn CPU per "
          f"request (healthz's over the refusal's): "
          f"{cpu_ratio:.2f}")  # fmt: skip
    other_sql_sale, other_sql_refused = _sql_other(r409), _sql_other(ref409)
    total_sql_refused = _sql_total(ref409)
    if other_sql_sale is not None:
        check("SQL by refused requests == 0", (_sql_total(r409) or 0) + (total_sql_refused or 0) == 0,
              f"sale: {_sql(r409)}; refused phase: {_sql(ref409)}")  # fmt: skip
        check("  ...other than token-cache loads == 0", other_sql_sale == 0 and other_sql_refused == 0,
              f"sale {other_sql_sale}, refused phase {other_sql_refused}")  # fmt: skip
    if pg:
        estimate = pg["busy"] - pg["idle"]
        verdict = (
            f"about {estimate:,} attributable to the refused phase"
            if estimate >= 0 and pg["idle"] <= max(100, pg["busy"] // 2)
            else "INCONCLUSIVE: other clients used the database heavily during one of the windows"
        )
        print(
            f"pg_stat_database (xact_commit + xact_rollback of {db['NAME']}): {pg['busy']:,} transactions over "
            f"the refused phase + /healthz + {PG_FLUSH_SECONDS:.0f} s flush wait ({pg['window']:.1f} s), "
            f"{pg['idle']:,} over an idle window as long just after (background: this bench's Celery worker, "
            f"other clients of the database) -> {verdict}"
        )
        if total_sql_refused is not None:
            print(
                f"  (the SQL probe counted {total_sql_refused:,} statements in the refused phase's 409s; each "
                "statement outside a transaction is one PostgreSQL transaction, and a request that queries at "
                "all also costs one `SELECT 1` that the probe does not see: CONN_HEALTH_CHECKS checks the "
                "connection before the first query of each request; reconnections add a few more)"
            )

    print()
    print("METRICS (/metrics after - before, all gunicorn workers via PROMETHEUS_MULTIPROC_DIR):")
    for (name, labels), value in sorted(metrics_after.items()):
        if name in ("shop_orders_created_total", "shop_checkout_refusals_total", "shop_idempotent_replays_total"):
            delta = value - metrics_before.get((name, labels), 0.0)
            print(f"  {name}{labels}: +{delta:,.0f}")
    gate_gauge = metrics_after.get(("shop_gate_remaining", f'{{sku="{SKU}"}}'))
    print(f'  shop_gate_remaining{{sku="{SKU}"}} after: {gate_gauge if gate_gauge is not None else "absent"}')
    if not celery_alive:
        print("warning: the Celery worker had exited before the end (see its log)", file=sys.stderr)

    if args.py_spy and profile_files is not None:
        print()
        profiler.report(profile_files, keep=args.py_spy_dir)

    print()
    print("CHECKS")
    for label, good, detail in checks:
        print(f"  [{'ok' if good else 'MISSED'}] {label}: {detail}")
    if args.no_cleanup:
        print("cleanup skipped (--no-cleanup): the next run removes the drill's orders first")
    else:
        print(f"cleanup: {done['orders']:,} orders, {done['events']:,} outbox events and {done['markers']:,} replay "
              f"markers deleted, reservations given back, flash sale {'ended' if done['ended'] else 'was not open'}, "
              f"carts and rate-limit windows deleted")  # fmt: skip
    print(f"total time {time.perf_counter() - t_start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
