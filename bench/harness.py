"""What the benches share (bench/README.md): the processes they start and stop, bench data made in bulk, the one
clean-up of bench orders, the wrk load generator, their options and figures."""

import argparse
import atexit
import contextlib
import ctypes
import functools
import importlib
import itertools
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from collections import namedtuple
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connection, transaction
from django.utils import timezone
from django_redis import get_redis_connection
from knox.crypto import hash_token
from knox.models import AuthToken

from bench import PRODUCTION_LIKE_ENV
from cart.storage import SHIPPING_FIELD, cart_key, shipping_value
from core.authentication import remember_tokens
from core.hotcache import bump_generation
from core.kafka import admin_client
from core.ratelimit import shopper_window
from core.sharding import customer_redis
from inventory import gate
from inventory.models import FlashSale, Stock, StockMovement
from inventory.services.flash_sales import end_flash_sale
from orders.models import Notification, OrderItem, OrderStatus, Payment, PendingOrderCount, Refund
from orders.services.holds import give_back_holds
from orders.services.queue_admission import forget_queue, order_key
from outbox.relay import new_producer
from outbox.topics import ensure_topics
from shop.models import Address, Product, ShippingMethod, ShippingZone, TaxRate
from shop.promotions import give_back_vouchers
from shop.services import ADDRESS_KEPT_SECONDS, address_key
from shop.tax_rates import SHIPPED_TAX_RATES, load_tax_rates, read_tax_rates_file

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
LUA = Path(__file__).with_name("wrk.lua")
HOST = "127.0.0.1"
PASSWORD = "bench-password-not-secret"  # bench shoppers on the development database only
DIE_WITH_PARENT = functools.partial(ctypes.CDLL("libc.so.6").prctl, 1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def setup() -> None:
    """SIGTERM and SIGHUP unwind through the benches' clean-ups (Django is set up on import: bench/__init__.py)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda signum, frame: sys.exit(128 + signum))


# Options several benches have: name -> (default, help); a bench may give its own default.
SHARED = {
    "rounds": (1, "measure each endpoint N times, report the median"),
    "workers": (2, "gunicorn workers"),
    "client_threads": (1, "wrk threads (1: the machine has 2 cores)"),
    "duration": (10.0, "seconds per endpoint"),
    "concurrency": (16, "open connections / requests in flight"),
    "threads": (4, "gunicorn threads per worker"),
    "warmup": (2.0, "unmeasured seconds per endpoint first"),
    "check": (False, "exit 1 when a goal is missed"),
}
ENDPOINTS = ("workers", "threads", "concurrency", "duration", "warmup", "rounds", "client_threads")  # measure_endpoints


def parser(doc: str, *shared: str, **own) -> argparse.ArgumentParser:
    """The `shared` options by name (name=default in `own` changes a default), then `own`: name=(default, help[,
    choices]); a help of None hides the option from --help (one a bench gives a child process of its own)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    options = {name: SHARED[name] for name in shared}
    for name, spec in own.items():
        options[name] = spec if isinstance(spec, tuple) else (spec, options[name][1])
    for name, (default, text, *choices) in options.items():
        kind = {"action": "store_true"} if default is False else {"type": type(default), "default": default}
        shown = "" if default is False or default == "" else f" (default {default})"
        help = argparse.SUPPRESS if text is None else text + shown
        p.add_argument("--" + name.replace("_", "-"), help=help, **kind, **({"choices": choices[0]} if choices else {}))
    return p


def parse(argv, doc: str, *shared: str, valid=None, error="", **own) -> argparse.Namespace:
    """parser(doc, *shared, **own)'s arguments; `error` unless valid(args) (when given)."""
    p = parser(doc, *shared, **own)
    args = p.parse_args(argv)
    if valid and not valid(args):
        p.error(error)
    return args


def pg_connect(**kwargs):
    params = {k: v for k, v in connection.get_connection_params().items() if k not in ("cursor_factory", "context")}
    return psycopg.connect(**params, **kwargs)


@contextlib.contextmanager
def lock_or_exit(bench: str, cleanup=lambda: None, keep: bool = False):
    """One run of a bench at a time on a database, for a `with`: an advisory lock keyed by the bench's name; `cleanup()`
    removes leftovers under it, a killed run's first and the run's last (unless `keep`: the next run's first)."""
    with pg_connect(autocommit=True) as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(%s)", [zlib.crc32(f"bench.{bench}".encode())]).fetchone()[0]:
            raise SystemExit(f"another `python -m bench.{bench}` is running on this database")
        cleanup()
        try:
            yield
        finally:
            if not keep:
                cleanup()


def next_order_ids(n: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence('orders', 'id')) FROM generate_series(1, %s)", [n])
        return [row[0] for row in cursor.fetchall()]


def copy_rows(table: str, columns: str, rows) -> None:
    """COPY through Django's connection (in its transaction, if one is open)."""
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def vacuum(tables: str) -> None:
    """VACUUM (ANALYZE) before timing, as autovacuum would (off on the development database)."""
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"VACUUM (ANALYZE) {tables}")


class Child:
    """A subprocess stopped however the bench exits (stop(), the end of a `with`, atexit, PR_SET_PDEATHSIG); its log
    kept if it fails."""

    def __init__(self, name: str, command: list[str], env: dict | None = None, *, pipe_stdout=False, group=False):
        self.name, self.command, self.pipe_stdout, self.group = name, command, pipe_stdout, group
        self.env = {**os.environ, **(env or {})}
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".txt", delete=False)
        self.proc: subprocess.Popen | None = None

    def start(self):
        out, err = (subprocess.PIPE, self.log) if self.pipe_stdout else (self.log, subprocess.STDOUT)
        streams = {"stdin": subprocess.DEVNULL, "stdout": out, "stderr": err, "text": True}
        group = {"start_new_session": self.group, "preexec_fn": DIE_WITH_PARENT}
        self.proc = subprocess.Popen(self.command, cwd=ROOT, env=self.env, **streams, **group)
        atexit.register(self.stop)
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """User + system time of the process and its children (gunicorn's workers)."""
        pids, total = [self.proc.pid] if self.proc else [], 0.0
        with contextlib.suppress(OSError, IndexError):
            pids += map(int, Path(f"/proc/{pids[0]}/task/{pids[0]}/children").read_text().split())
        for pid in pids:
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        return total

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _kill(self, proc, signum) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum) if self.group else proc.send_signal(signum)

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            self._kill(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill(proc, signal.SIGKILL)
                proc.wait()
        if self.group:
            self._kill(proc, signal.SIGKILL)  # whatever of the group is left (a Celery pool child)
        with contextlib.suppress(OSError):
            self.log.close()
            if proc.returncode in (0, -signal.SIGTERM):
                os.unlink(self.log.name)


def wait_until(ready, seconds: float, failure: str | None, *children: Child, every: float = 0.1) -> None:
    """Until ready() is true (an exception from it: not yet); fail when a child exited or time is up (None: return)."""
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(Exception):
            if ready():
                return
        if (dead := [c for c in children if not c.alive()]) or time.monotonic() > deadline:
            if failure is None:
                return
            why = f"{dead[0].name} exited: {failure}" if dead else f"{failure} within {seconds:g} s"
            raise RuntimeError(why + "".join(f"\n{c.name} log:\n{c.tail()}" for c in dead or children))
        time.sleep(every)


def open_loop(place, rate: float, threads: int, count: float = math.inf) -> tuple[float, list[threading.Thread]]:
    """place(i, due) for i = 0, 1, ... `count` (or until the process ends), each due at start + i / rate (monotonic
    clock), however long the ones before took; from `threads` daemon threads; returns (start, the threads)."""
    tickets, start = itertools.count(), time.monotonic() + 0.2

    def body() -> None:
        try:
            while (i := next(tickets)) < count:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
                place(i, start + i / rate)
        finally:
            connection.close()

    pool = [threading.Thread(target=body, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    return start, pool


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class Gunicorn(Child):
    def __init__(self, *, workers=2, threads=4, env=None, app="config.wsgi", connections=None):
        """`connections`: the client's keep-alive connections, shared out evenly (else the first worker to wake
        accepts most of them, and a round measures one worker on one core: half the rate, its threads fighting
        for the GIL)."""
        bind = f"{HOST}:{free_port()}"
        self.base_url = f"http://{bind}"
        options = f"--bind {bind} --workers {workers} --threads {threads} --graceful-timeout 10 --no-control-socket"
        if connections:
            options += f" --worker-connections {-(-connections // workers)}"
        command = [str(VENV_BIN / "gunicorn"), app, *options.split()]  # no control socket: a dev server's may be there
        super().__init__("gunicorn", command, {**PRODUCTION_LIKE_ENV, **(env or {})})

    def start(self):
        super().start()
        wait_until(self.healthy, 60, "gunicorn gave no 200 on /healthz", self)
        return self

    def healthy(self) -> bool:
        with urllib.request.urlopen(self.base_url + "/healthz", timeout=2) as response:
            return response.status == 200


@contextlib.contextmanager
def counting_sql(*marks: str):
    """The statements Django sends meanwhile, counted in the list it yields: all of them, then per mark those whose SQL
    contains it (the first mark that matches)."""
    counts = [0] * (1 + len(marks))

    def count(execute, sql, params, many, context):
        counts[0] += 1
        for i, mark in enumerate(marks, start=1):
            if mark in sql:
                counts[i] += 1
                break
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        yield counts


@functools.cache
def wsgi_application():  # config.wsgi's, imported in a server only: it starts warming a queue producer
    return importlib.import_module("config.wsgi").application


Shopper = namedtuple("Shopper", "user_id username token")
BENCH_ADDRESS = dict(name="Bench shopper", line1="Calle Mayor 1", line2="", city="Madrid", postal_code="28013")
BENCH_ADDRESS |= {"country": "ES", "phone": "+34 600 000 000"}


# Every bench cart ships: its products weigh something, and a flat method ships to the bench address.
SHIPPING, SHIPPING_PRICE, WEIGHT = "bench-ship", 499, 350
SHIPS = {SHIPPING_FIELD: shipping_value(SHIPPING, BENCH_ADDRESS["country"])}  # a cart's chosen method (cart/storage.py)


def ensure_shipping_and_tax(skus: list[str]) -> None:
    """The products `skus` weigh WEIGHT, SHIPPING ships to the bench address, and the shop has tax rates (the
    shipped table, in a shop with none): a cart or checkout of them prices shipping and tax (bench/README.md)."""
    if not TaxRate.objects.exists():
        load_tax_rates(rows=read_tax_rates_file(SHIPPED_TAX_RATES))
    countries = [BENCH_ADDRESS["country"]]
    zone, _ = ShippingZone.objects.get_or_create(name="Bench zone", defaults={"countries": countries})
    defaults = dict(name="Bench shipping", zone=zone, price=SHIPPING_PRICE, min_days=1, max_days=2)
    ShippingMethod.objects.get_or_create(code=SHIPPING, defaults=defaults)  # its signal drops the caches
    if Product.objects.filter(sku__in=skus).exclude(weight_grams=WEIGHT).update(weight_grams=WEIGHT):
        bump_generation()  # an UPDATE sends no signal


def ensure_users(count: int, *, prefix: str, password: str | None = None) -> list[int]:
    """Users {prefix}00001... in bulk with the account signal's pending-order counter and a saved address; ids."""
    user_model = get_user_model()
    names = [f"{prefix}{i:05d}" for i in range(1, count + 1)]
    bulk = {"batch_size": 2000, "ignore_conflicts": True}
    with transaction.atomic():
        existing = set(user_model.objects.filter(username__in=names).values_list("username", flat=True))
        if missing := [name for name in names if name not in existing]:
            hashed = make_password(password)
            user_model.objects.bulk_create([user_model(username=n, password=hashed) for n in missing], **bulk)
        for user in user_model.objects.filter(username__in=names, is_active=False):  # signals bump the hot cache
            user.is_active = True
            user.save(update_fields=["is_active"])
        ids = dict(user_model.objects.filter(username__in=names).values_list("username", "id"))
        counters = [PendingOrderCount(customer_id=i, pending=0) for i in ids.values()]
        PendingOrderCount.objects.bulk_create(counters, **bulk)
        Address.objects.bulk_create([Address(customer_id=i, **BENCH_ADDRESS) for i in ids.values()], **bulk)
    return [ids[name] for name in names]


def user_ids(prefix: str) -> list[int]:
    return list(get_user_model().objects.filter(username__startswith=prefix).values_list("id", flat=True))


def ensure_shoppers(count: int, *, prefix: str) -> list[Shopper]:
    """Users with fresh API tokens, written through to Redis as the token API does."""
    ids = ensure_users(count, prefix=prefix, password=PASSWORD)
    with transaction.atomic():
        # No signals: these tokens are in no process's cache (a bench starts its own servers).
        AuthToken.objects.filter(user_id__in=ids)._raw_delete(AuthToken.objects.db)
        pairs, expiry = [(i, secrets.token_hex(32)) for i in ids], timezone.now() + timedelta(days=1)
        rows = [AuthToken(digest=hash_token(t), token_key=t[:15], user_id=u, expiry=expiry) for u, t in pairs]
        AuthToken.objects.bulk_create(rows, batch_size=1000)
        remember_tokens(AuthToken.objects.filter(user_id__in=ids).select_related("user"))
    return [Shopper(uid, f"{prefix}{i:05d}", t) for i, (uid, t) in enumerate(pairs, start=1)]


def ensure_products(skus: list[str], min_available: int) -> None:
    with transaction.atomic():
        existing = dict(Product.objects.filter(sku__in=skus).values_list("sku", "is_active"))
        missing = [sku for sku in skus if sku not in existing]
        inactive = [sku for sku, active in existing.items() if not active]
        products = [Product(sku=sku, name=f"Bench product {sku}", price=1000 + i) for i, sku in enumerate(missing)]
        Product.objects.bulk_create(products, ignore_conflicts=True)
        Product.objects.filter(sku__in=inactive).update(is_active=True)
        if missing or inactive:  # bulk writes send no signals: drop the hot caches ourselves
            transaction.on_commit(bump_generation)
        Stock.objects.bulk_create([Stock(product_id=sku) for sku in skus], ignore_conflicts=True)
        available = dict(Stock.objects.filter(product_id__in=skus).values_list("product_id", "available"))
        if top_up := {sku: min_available - available[sku] for sku in skus if available[sku] < min_available}:
            received = {"note": "bench", "reason": StockMovement.Reason.RECEIVED}
            movements = [StockMovement(product_id=s, delta=d, **received) for s, d in top_up.items()]
            StockMovement.objects.bulk_create(movements)
            update = "UPDATE inventory AS s SET available = s.available + d.delta FROM unnest(%s::text[], %s::int[])"
            with connection.cursor() as cursor:
                cursor.execute(f"{update} AS d(sku, delta) WHERE s.sku = d.sku", [list(top_up), list(top_up.values())])


def _delete_keys(redis, keys: list) -> None:
    for start in range(0, len(keys), 5000):
        redis.delete(*keys[start : start + 5000])


def fill_carts(carts: list[tuple[int, dict[str, int]]]) -> None:
    """Exactly these carts, checkout rate limits reset, each shopper's saved address as set_default_address keeps it."""
    redis, address = customer_redis(), json.dumps(BENCH_ADDRESS)
    for start in range(0, len(carts), 2000):
        pipe = redis.pipeline(transaction=False)
        for customer_id, lines in carts[start : start + 2000]:
            pipe.delete(cart_key(customer_id))  # one key a command: a cluster's pipeline takes no more
            pipe.delete(shopper_window("checkout", customer_id).key)
            pipe.hset(cart_key(customer_id), mapping=lines)
            pipe.expire(cart_key(customer_id), settings.CART_TTL_SECONDS)
            pipe.set(address_key(customer_id), address, ex=ADDRESS_KEPT_SECONDS)
        pipe.execute()


def delete_orders(customer_ids: list[int]) -> None:
    """The one clean-up of bench orders and what they hold (bench/README.md). Idempotent."""
    holding = [str(OrderStatus.PENDING_PAYMENT), str(OrderStatus.PAID)]  # a cancelled order gave it back
    connection.close_if_unusable_or_obsolete()  # a failed run may leave a broken connection behind
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, customer_id, idempotency_key FROM orders WHERE customer_id = ANY(%s)", [customer_ids]
        )
        orders = cursor.fetchall()
        ids = [row[0] for row in orders]
        cursor.execute(
            """
            UPDATE inventory AS s SET available = s.available + r.q, reserved = s.reserved - r.q
            FROM (SELECT i.sku, SUM(i.quantity) AS q FROM order_items i JOIN orders o ON o.id = i.order_id
                  WHERE o.id = ANY(%s) AND o.status = ANY(%s) GROUP BY i.sku) AS r
            WHERE s.sku = r.sku""",
            [ids, holding],
        )
        give_back_holds(order_ids=ids)  # before the items go: it reads them
        give_back_vouchers(order_ids=ids)
        tables = [m._meta.db_table for m in (Refund, Payment, Notification, OrderItem)] + ["order_queued_aliases"]
        deletes = ["outbox_events WHERE aggregate_type = 'order' AND aggregate_id = ANY(%s::text[])"]
        deletes += [f"{table} WHERE order_id = ANY(%s)" for table in tables] + ["orders WHERE id = ANY(%s)"]
        for delete in deletes:
            cursor.execute(f"DELETE FROM {delete}", [ids])
        cursor.execute("UPDATE order_pending_counts SET pending = 0 WHERE customer_id = ANY(%s)", [customer_ids])
    redis, customers = get_redis_connection("default"), set(customer_ids)
    _delete_keys(customer_redis(), [k for c in customer_ids for k in (cart_key(c), shopper_window("checkout", c).key)])
    _delete_keys(gate.connection(), [gate.replay_key(c, key) for _, c, key in orders])
    queued = [k for k in redis.scan_iter("queue:key:*", count=10_000) if int(k.split(b":")[2]) in customers]
    _delete_keys(redis, queued + [order_key(int(i)) for i in (redis.mget(queued) if queued else []) if i])


def delete_products(prefix: str) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        for table in ("inventory_stockmovement", "inventory", "shop_product"):
            cursor.execute(f"DELETE FROM {table} WHERE sku LIKE %s", [prefix.replace("_", "\\_") + "%"])
        if cursor.rowcount:  # products deleted (raw deletes send no signals)
            transaction.on_commit(bump_generation)


def end_sale(sku: str) -> None:
    forget_queue(sku=sku)
    if FlashSale.objects.filter(product_id=sku).exists():
        end_flash_sale(sku=sku)


def delete_topics(topics: list[str]) -> None:
    admin = admin_client()  # kept alive until the futures are done
    with contextlib.suppress(Exception):  # the broker may not support it; the topics are the bench's own
        for future in admin.delete_topics(topics, operation_timeout=10, request_timeout=10).values():
            future.result(timeout=10)


def queue_topic(name: str) -> dict[str, str]:
    """A checkout topic and consumer group prefix of the run's own, here and in the environment returned."""
    settings.KAFKA_CHECKOUT_TOPIC, settings.KAFKA_CONSUMER_GROUP_PREFIX = name, f"{name}."
    ensure_topics(topics=[name])
    return {"KAFKA_CHECKOUT_TOPIC": name, "KAFKA_CONSUMER_GROUP_PREFIX": f"{name}."}


def queue_writer(env: dict) -> Child:
    return Child("writer", [str(VENV_BIN / "python"), "manage.py", "write_queued_orders"], env)


WARM_UP = (b"warm-up", b"warm-up")  # a producer's first message: connected, with its idempotent producer id


def produce(topic: str, messages, producer=None) -> int:
    """(key, value[, headers]) messages, all delivered on return; the errors."""
    producer, errors = producer or new_producer(), []
    delivered = lambda error, message: error and errors.append(error)  # noqa: E731
    for key, value, *headers in messages:
        while True:
            try:
                producer.produce(topic, value, key, headers=(headers or [None])[0], on_delivery=delivered)
                break
            except BufferError:  # librdkafka's queue is full: serve deliveries and retry
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"messages to {topic} not delivered within 60 s")
    return len(errors)


def lua(value) -> str:  # a Lua literal: a number, a string, or a list of them
    if isinstance(value, list | tuple):
        return "{" + ",".join(map(lua, value)) + "}"
    if isinstance(value, int):
        return str(value)
    return '"' + "".join(c if c.isalnum() or c in " -_./:{}[],'" else f"\\{ord(c):03d}" for c in value) + '"'


Spec = namedtuple("Spec", "method path headers body", defaults=({}, b""))  # one HTTP request


def raw_request(spec: Spec, host: str) -> str:
    headers = {"Host": host, **spec.headers, **({"Content-Length": str(len(spec.body))} if spec.body else {})}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"{spec.method} {spec.path} HTTP/1.1\r\n{head}\r\n{spec.body.decode('latin-1')}"


@dataclass
class Run:
    client: str
    concurrency: int
    sent: int
    answered: int
    seconds: float
    errors: int  # connect/read/write/timeout errors (checkout.run_threads: failed orders)
    bad_status: int  # responses >= 400
    p50_ms: float
    p99_ms: float
    cpu_seconds: float  # the server's (gunicorn master and workers) during the run
    records: list = field(default_factory=list, repr=False)  # (status, ms, error code, SQL counts, monotonic time)
    failures: list = field(default_factory=list, repr=False)  # checkout.run_threads: what went wrong
    probe: int | None = None  # what measure_endpoints' probe counted during the run

    @property
    def rps(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return self.cpu_seconds * 1000 / self.answered if self.answered else 0.0

    def by(self, predicate) -> list:
        return [r for r in self.records if predicate(r)]


def run_wrk(server, *, specs=(), numbered=(), count=None, duration=None, concurrency=16, threads=1, record=False):
    """wrk, closed loop, `count` requests or `duration` s: `specs` in turn, or numbered requests (bench/wrk.lua)."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk (make bench-tools)")
    threads = max(1, min(threads, concurrency, count or concurrency))
    connections = max(concurrency, threads)
    host = server.base_url.removeprefix("http://")
    prefix, tokens, who = numbered or ("", [], [])
    with tempfile.TemporaryDirectory(prefix="bench-wrk-", ignore_cleanup_errors=True) as workdir:
        out, script = f"{workdir}/out-" if record else "", Path(workdir, "bench.lua")
        values = {"HOST": host, "COUNT": count or 0, "OUT": out, "PREFIX": prefix, "TOKENS": tokens}
        values |= {"REQUESTS": [raw_request(s, host) for s in specs], "WHO": [i + 1 for i in who]}
        script.write_text("".join(f"local {k} = {lua(v)}\n" for k, v in values.items()) + LUA.read_text())
        cap = duration if count is None else max(120, math.ceil(count / 100), duration or 0)
        options = f"-t {threads} -c {connections} -d {max(1, math.ceil(cap))}s --timeout 10s -s {script}"
        cmd = ["wrk", "--latency", *options.split(), server.base_url + "/", "--", str(threads)]
        cpu0, began = server.cpu_seconds(), time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output, done = [], 0
        for line in (line for line in proc.stdout if not line.startswith("P ")):  # "P ...": progress
            output.append(line)
            if line.startswith("BENCH_THREAD_DONE") and (done := done + 1) == threads:
                proc.send_signal(signal.SIGINT)  # wrk stops sleeping and reports
        proc.wait(timeout=60)
        wall, cpu = time.perf_counter() - began, server.cpu_seconds() - cpu0
        match = re.search(r"^BENCH_JSON (.*)$", "".join(output), re.MULTILINE)
        if match is None:
            raise RuntimeError(f"wrk failed ({proc.returncode}):\n{''.join(output)}")
        data, records = json.loads(match.group(1)), []
        rows = [x.split(" ") for path in Path(workdir).glob("out-*") for x in path.read_text().splitlines()]
        for status, micros, code, sql, at in (row for row in rows if len(row) == 5):  # a thread's last may be cut
            counts = None if sql == "-" else tuple(map(int, sql.split(",")))
            records.append((int(status), int(micros) / 1000, code, counts, int(at) / 1e6))
    answered = len(records) if record else data["requests"]
    if count is None:
        seconds = data["duration_us"] / 1e6
    else:  # from the first request to the last answer, unless a thread did not finish
        seconds = data["elapsed_us"] / 1e6 if data["elapsed_us"] and answered >= count else wall
    ms = sorted(r[1] for r in records)
    latency = [pct(ms, 50), pct(ms, 99)] if ms else [data["p50_us"] / 1000, data["p99_us"] / 1000]
    errors, bad = data["connect"] + data["read"] + data["write"] + data["timeout"], data["status"]
    sent, client = count or answered, f"wrk -t{threads}"
    return Run(client, connections, sent, answered, seconds, errors, bad, *latency, cpu, records)


def measure_endpoints(args, specs: dict[str, list[Spec]], *, env=None, app="config.wsgi", probe=None):
    """On a gunicorn of its own (--workers, --threads), each endpoint warmed up (--warmup s), then --rounds rounds of
    every endpoint in turn (--duration, --concurrency, --client-threads); the median run of each."""
    load = {"duration": args.duration, "concurrency": args.concurrency, "threads": args.client_threads}
    runs: dict[str, list[Run]] = {name: [] for name in specs}
    with Gunicorn(workers=args.workers, threads=args.threads, env=env, app=app, connections=args.concurrency) as server:
        print(f"gunicorn {args.workers} x {args.threads} threads")
        for spec_list in specs.values() if args.warmup > 0 else ():
            run_wrk(server, specs=spec_list, **{**load, "duration": args.warmup})
        for n in range(1, args.rounds + 1):
            for name, spec_list in specs.items():
                before = probe() if probe else None
                runs[name].append(run := run_wrk(server, specs=spec_list, **load))
                run.probe = probe() - before if probe else None
                base = runs[next(iter(specs))][-1]
                by_rps, by_cpu = ratios_to(base, run)
                ratios = "" if run is base else f" = {by_rps:.2f} (by CPU {'-' if by_cpu is None else f'{by_cpu:.2f}'})"
                print(f"  round {n} {name}: {run.rps:,.0f} req/s, {run.cpu_ms:.3f} CPU ms/req{ratios}")
    return {name: median(r, lambda x: x.rps) for name, r in runs.items()}


def ratios_to(base: Run, run: Run) -> tuple[float, float | None]:
    """`run` against `base`: by requests/s, and by CPU per request (inverted)."""
    return run.rps / base.rps if base.rps else 0.0, base.cpu_ms / run.cpu_ms if run.cpu_ms else None


def print_endpoints(runs: dict[str, Run], args, ratio: str, goal: float, extra=None) -> int:
    """The endpoints' table, each but the first with its ratios to it (requests/s, and CPU per request inverted), and
    the goal (every ratio by requests/s >= `goal`); the exit code: 1 on errors, or on a missed goal with --check."""
    (_, base), extra = next(iter(runs.items())), extra or {}
    ratios = {name: ratios_to(base, r) for name, r in list(runs.items())[1:]}
    rounds = f", median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"\nclient {base.client}, {base.concurrency} connections, {args.duration:g} s per endpoint{rounds}")
    rows = []
    for name, r in runs.items():
        figures = f"{r.answered:,}", f"{r.rps:,.0f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.cpu_ms:.2f}"
        by = ("-" if x is None else f"{x:.2f}" for x in ratios.get(name, (None, None)))
        rows.append([name, *figures, r.errors + r.bad_status, *(f(r) for f in extra.values()), *by])
    headers = ["endpoint", "requests", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "errors", *extra, ratio, "by CPU"]
    print_table(headers, rows)
    ok = all(by_rps >= goal for by_rps, _ in ratios.values())
    print(f"goal {ratio} >= {goal}: {verdict(ok, 'met', 'NOT met')}")
    return 1 if any(r.errors or r.bad_status for r in runs.values()) or (args.check and not ok) else 0


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return sorted(values)[max(0, math.ceil(p / 100 * len(values)) - 1)]


def latency(ms: list[float], *ps: float) -> str:
    return ", ".join(f"p{p:g} {pct(ms, p):.1f} ms" for p in ps or (50, 99)) if ms else "-"


def median(runs: list, key):  # of an even count, the lower middle one
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def each(values, spec: str = ".2f", sep: str = " ") -> str:
    return sep.join(f"{v:{spec}}" for v in values)


def verdict(met: bool | None, yes: str = "ok", no: str = "MISSED") -> str:
    """None: a figure printed as information, with no goal."""
    return "info" if met is None else yes if met else no


def print_checks(checks: list[tuple], title: str | None = None, yes: str = "ok", no: str = "MISSED") -> bool:
    if title:
        print(f"\n{title}")
    for label, met, *detail in checks:
        print(f"  [{verdict(met, yes, no)}] {label}" + (f": {detail[0]}" if detail else ""))
    return all(met for _, met, *_ in checks)


def print_table(headers: list[str], rows: list) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
