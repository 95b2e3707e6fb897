"""Checkout throughput: place_order against the same SQL through plain psycopg (issue 4, "What it must show").

    .venv/bin/python bench/checkout.py                       # 16 threads, 3 rounds of 1500 orders
    .venv/bin/python bench/checkout.py --threads 16 --orders 3000 --rounds 1 --skus 1000

For two scenarios, every order a one-line cart (quantity 1):
  (a) one hot SKU with plenty of stock,
  (b) --skus SKUs with plenty of stock, each order's SKU picked at random,
it measures orders/s and p50/p99 latency of `place_order(customer_id=..., idempotency_key=...)` with
--threads threads (each its own Django connection), and in the same run, with the same thread count
(one psycopg connection per thread, autocommit off), the ceiling: the very SQL statements Django
emits for such a checkout (captured from one place_order at start-up) run through plain psycopg,
in Django's order: SELECT prices (sku IN (...)); INSERT the order ON CONFLICT DO NOTHING
RETURNING id; INSERT order_items (one INSERT ... VALUES, a row per line); INSERT outbox_events
RETURNING id; the conditional UPDATE of inventory; COMMIT. Then the ratio Django/psycopg.
It also counts the SQL statements of a checkout of a k-line cart (k = 1, 3, 5), goal k + 6.

Goals: ratio >= 0.7 on (a), >= 0.5 on (b).

The psycopg side does no Redis call: the Django side also reads the cart (HGETALL) and clears it
after commit (DEL), two Redis round-trips that count against it.

Uses the development database and Redis db 0 (settings' defaults, like `make run`), with DEBUG off
(production-like: no query logging). It creates, once, products BENCH-CO-HOT and BENCH-CO-0001...
and shoppers BENCH-CO-00001... (unusable passwords), fills those shoppers' carts before each run
(outside the timing), and at the end - and at the start, after a run that was killed - deletes the
orders, order items and outbox events of BENCH-CO- shoppers, gives the stock they reserved back and
deletes their carts. The products and shoppers stay, for the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
PREFIX = "BENCH-CO-"
HOT_SKU = f"{PREFIX}HOT"
STOCK = 1_000_000  # "plenty": topped up to at least this (plus what a run needs) before a run
GOALS = {"a": 0.7, "b": 0.5}
STATEMENT_GOAL_EXTRA = 6  # k + 6 statements for a k-line cart, BEGIN/COMMIT included
LOCK_KEY = 0x42_43_4F_01  # pg advisory lock: one checkout bench at a time on a database



sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402


def setup_django() -> None:
    _harness.setup_django(production_like=True)  # DEBUG off: no query logging


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=16, help="threads, each with its own connection (default 16)")
    p.add_argument("--orders", type=int, default=1500, help="measured orders per run (default 1500)")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="runs per scenario and side, interleaved; the median run is reported (default 3)",
    )
    p.add_argument("--warmup", type=int, default=10, help="unmeasured orders per thread before each run (default 10)")
    p.add_argument("--skus", type=int, default=1000, help="SKUs of scenario (b) (default 1000)")
    p.add_argument("--seed", type=int, default=4, help="random seed of the SKU picks")
    p.add_argument("--scenarios", default="ab", help="which scenarios to run: a, b or ab (default ab)")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = p.parse_args(argv)
    if args.threads < 1 or args.rounds < 1 or args.orders < args.threads or args.skus < 5:
        p.error("need --threads >= 1, --rounds >= 1, --orders >= --threads, --skus >= 5")
    if not args.scenarios or not set(args.scenarios) <= {"a", "b"}:
        p.error("--scenarios: a, b or ab")
    return args


# --- Data ---------------------------------------------------------------------------------------


def bench_skus(count: int) -> list[str]:
    return [f"{PREFIX}{i:04d}" for i in range(1, count + 1)]


def ensure_products(skus: list[str], min_available: int) -> None:
    """Active products with at least `min_available` units available; stock received with a ledger
    entry (so stock_audit stays balanced). Bulk, idempotent."""
    from django.db import connection, transaction

    from config.hotcache import bump_generation
    from inventory.models import Stock, StockMovement
    from shop.models import Product

    with transaction.atomic():
        existing = dict(Product.objects.filter(sku__in=skus).values_list("sku", "is_active"))
        missing = [sku for sku in skus if sku not in existing]
        inactive = [sku for sku, active in existing.items() if not active]
        Product.objects.bulk_create(
            [Product(sku=sku, name=f"Bench checkout {sku.removeprefix(PREFIX)}", price=1000 + i)
             for i, sku in enumerate(missing)],
            ignore_conflicts=True,
        )  # fmt: skip
        if inactive:
            Product.objects.filter(sku__in=inactive).update(is_active=True)
        if missing or inactive:  # bulk writes send no signals: drop the hot caches ourselves
            transaction.on_commit(bump_generation)
        Stock.objects.bulk_create([Stock(product_id=sku) for sku in skus], ignore_conflicts=True)
        available = dict(Stock.objects.filter(product_id__in=skus).values_list("product_id", "available"))
        top_up = {sku: min_available - available[sku] for sku in skus if available[sku] < min_available}
        if top_up:
            StockMovement.objects.bulk_create(
                [StockMovement(product_id=sku, delta=delta, reason=StockMovement.Reason.RECEIVED, note="bench checkout")
                 for sku, delta in top_up.items()]
            )  # fmt: skip
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {Stock._meta.db_table} AS s SET available = s.available + d.delta "
                    "FROM unnest(%s::text[], %s::int[]) AS d(sku, delta) WHERE s.sku = d.sku",
                    [list(top_up), list(top_up.values())],
                )


def ensure_shoppers(count: int) -> list[int]:
    """Shoppers BENCH-CO-00001... (no usable password: they never log in), their ids in order."""
    return _harness.ensure_user_ids(count, prefix=PREFIX)


fill_carts = _harness.fill_carts


def cleanup() -> dict[str, int]:
    """Delete what BENCH-CO- shoppers' checkouts left (outbox events, items, orders, carts) and give
    the stock their open orders reserved back, in one transaction: running it again is a no-op."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django_redis import get_redis_connection

    from cart.storage import cart_key
    from inventory.models import Stock
    from orders.models import Order, OrderItem, OrderStatus
    from outbox.models import OutboxEvent

    users = get_user_model()._meta.db_table
    orders, items = Order._meta.db_table, OrderItem._meta.db_table
    outbox, stock = OutboxEvent._meta.db_table, Stock._meta.db_table
    bench_orders = f"SELECT o.id FROM {orders} o JOIN {users} u ON u.id = o.customer_id WHERE u.username LIKE %s"
    like = PREFIX + "%"
    # Orders still holding a reservation: PENDING_PAYMENT and PAID (a cancelled one gave it back).
    holding = [OrderStatus.PENDING_PAYMENT, OrderStatus.PAID]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {stock} AS s SET available = s.available + r.q, reserved = s.reserved - r.q
            FROM (SELECT i.sku, SUM(i.quantity) AS q FROM {items} i JOIN {orders} o ON o.id = i.order_id
                  WHERE o.id IN ({bench_orders}) AND o.status = ANY(%s) GROUP BY i.sku) AS r
            WHERE s.sku = r.sku
            """,
            [like, [str(s) for s in holding]],
        )
        restored = cursor.rowcount
        cursor.execute(
            f"DELETE FROM {outbox} WHERE aggregate_type = 'order' AND aggregate_id IN "
            f"(SELECT id::text FROM ({bench_orders}) b)",
            [like],
        )
        events = cursor.rowcount
        cursor.execute(f"DELETE FROM {items} WHERE order_id IN ({bench_orders})", [like])
        cursor.execute(f"DELETE FROM {orders} WHERE id IN ({bench_orders})", [like])
        deleted = cursor.rowcount
        # The orders went without payment or cancel: their pending-order slots go with them.
        cursor.execute(
            f"DELETE FROM order_pending_counts WHERE customer_id IN (SELECT id FROM {users} WHERE username LIKE %s)",
            [like],
        )
        cursor.execute(f"SELECT id FROM {users} WHERE username LIKE %s", [like])
        customer_ids = [row[0] for row in cursor.fetchall()]
    redis = get_redis_connection("default")
    for start in range(0, len(customer_ids), 5000):
        keys = [cart_key(cid) for cid in customer_ids[start : start + 5000]]
        if keys:
            redis.delete(*keys)
    return {"orders": deleted, "events": events, "skus_restored": restored}


# --- The SQL of one checkout, captured from Django ----------------------------------------------


@dataclass
class Statement:
    sql: str
    params: list
    kind: str = ""  # select_prices, insert_order, update_stock, insert_items, insert_event
    columns: list[str] = field(default_factory=list)  # for the INSERTs: the column of each parameter


_INSERT = re.compile(r'^\s*INSERT INTO "?(\w+)"?\s*\(([^)]*)\)', re.IGNORECASE | re.DOTALL)
_VALUES = re.compile(r"^\s*VALUES\s*\(([^)]*)\)", re.IGNORECASE)


def _names_table(sql: str, keyword: str, table: str) -> bool:
    """`keyword table` in sql, the table name quoted (ORM) or not (raw SQL)."""
    return re.search(rf'\b{keyword}\s+"?{re.escape(table)}"?(\s|$)', sql, re.IGNORECASE) is not None


# The order's INSERT is a WITH statement with named parameters (it takes the shopper's
# pending-order slot too): parameter name -> column.
_ORDER_PARAMS = {"customer": "customer_id", "key": "idempotency_key", "hash": "request_hash", "status": "status",
                 "total": "total_amount", "currency": "currency", "created": "created_at", "expires": "expires_at",
                 "limit": "limit"}  # fmt: skip


def _values(params) -> list:
    return list(params.values()) if isinstance(params, dict) else params


def _classify(statement: Statement, tables: dict[str, str]) -> None:
    sql = statement.sql.strip()
    head = sql.split(None, 1)[0].upper()
    match = _INSERT.match(sql)
    if head == "WITH" and _names_table(sql, "INSERT INTO", tables["orders"]):
        statement.kind = "insert_order"
        statement.columns = [_ORDER_PARAMS[name] for name in statement.params]
    elif match:
        table = match.group(1)
        columns = [c.strip().strip('"') for c in match.group(2).split(",")]
        # VALUES (...) may hold literals (outbox: attempts 0, last_error ''): keep the columns of
        # the placeholders only (of the first row: a one-line cart has one).
        values = _VALUES.match(sql[match.end() :])
        if values:
            columns = [c for c, v in zip(columns, values.group(1).split(","), strict=True) if "%s" in v]
        statement.columns = columns
        statement.kind = {tables["orders"]: "insert_order", tables["items"]: "insert_items",
                          tables["outbox"]: "insert_event"}.get(table, f"insert {table}")  # fmt: skip
    elif head == "SELECT" and _names_table(sql, "FROM", tables["products"]):
        statement.kind = "select_prices"
    elif head == "UPDATE" and _names_table(sql, "UPDATE", tables["stock"]):
        statement.kind = "update_stock"
    else:
        statement.kind = f"other: {sql[:60]}"


def capture_checkout(customer_id: int, lines: dict[str, int], key: str) -> list[Statement]:
    """Place one order through Django and record every statement (SQL template and parameters).

    One order is placed first, unrecorded, so that what place_order loads once per process (the
    flash-sale list, the cache generation) is loaded: the capture is a checkout in steady state."""
    from django.db import connection

    from orders.services import place_order

    fill_carts([(customer_id, lines)])
    place_order(customer_id=customer_id, idempotency_key=f"{key}-first")
    captured: list[Statement] = []

    def wrapper(execute, sql, params, many, context):
        captured.append(Statement(sql=sql, params=dict(params) if isinstance(params, dict) else list(params or [])))
        return execute(sql, params, many, context)

    fill_carts([(customer_id, lines)])
    with connection.execute_wrapper(wrapper):
        placed = place_order(customer_id=customer_id, idempotency_key=key)
    if placed.replayed:
        raise RuntimeError("the capture order was a replay: stale bench data?")
    for statement in captured:
        _classify(statement, _tables())
    return captured


def _tables() -> dict[str, str]:
    from inventory.models import Stock
    from orders.models import Order, OrderItem
    from outbox.models import OutboxEvent
    from shop.models import Product

    return {"orders": Order._meta.db_table, "items": OrderItem._meta.db_table, "outbox": OutboxEvent._meta.db_table,
            "products": Product._meta.db_table, "stock": Stock._meta.db_table}  # fmt: skip


class CheckoutSQL:
    """The captured statements of a one-line checkout, with parameter builders for new orders.

    Parameters are built by column name for the INSERTs and by position (checked against the
    captured call) for the SELECT and the UPDATE, then compared with what Django sent for the
    capture order, so that the psycopg side runs the same statements with the same values."""

    EXPECTED = {"select_prices", "insert_order", "update_stock", "insert_items", "insert_event"}

    def __init__(self, statements: list[Statement], *, sku: str, quantity: int, customer_id: int, key: str):
        kinds = [s.kind for s in statements]
        # The psycopg side replays them in Django's order (the stock UPDATE now comes last); only
        # what needs an earlier result is checked: prices before the order, its id before the rest.
        known = [k for k in kinds if k in self.EXPECTED]
        if (
            sorted(known) != sorted(self.EXPECTED)
            or kinds.index("select_prices") > kinds.index("insert_order")
            or any(kinds.index("insert_order") > kinds.index(k) for k in ("insert_items", "insert_event"))
        ):
            raise RuntimeError(
                f"place_order ran {kinds}: the bench expects each of {sorted(self.EXPECTED)} once, the price "
                "SELECT before the order INSERT and that before the items and the event: update bench/checkout.py"
            )
        # Any other statement is replayed as captured, the capture order's SKU, customer, key and
        # order id in its parameters replaced by the new order's.
        self.others = [s for s in statements if s.kind not in self.EXPECTED]
        self.capture_values = {"sku": sku, "customer_id": customer_id, "key": key}
        self.statements = statements
        self.by_kind = {s.kind: s for s in statements}
        select, update = self.by_kind["select_prices"], self.by_kind["update_stock"]
        if select.params != [sku]:
            raise RuntimeError(f"unexpected SELECT parameters {select.params!r}")
        # Which UPDATE parameters are the SKU and which the quantity (quantity != 1 in the capture).
        self.update_slots = ["sku" if p == sku else "q" if p == quantity else None for p in update.params]
        if None in self.update_slots or "sku" not in self.update_slots:
            raise RuntimeError(f"unexpected UPDATE parameters {update.params!r}")
        self._verify(sku=sku, quantity=quantity, customer_id=customer_id, key=key)

    def _verify(self, *, sku, quantity, customer_id, key) -> None:
        from orders.models import Order
        from shop.models import Product

        order = self.by_kind["insert_order"]
        order_params = dict(zip(order.columns, _values(order.params), strict=True))
        name, price = Product.objects.values_list("name", "price").get(sku=sku)
        event = dict(zip(self.by_kind["insert_event"].columns, self.by_kind["insert_event"].params, strict=True))
        order_id = Order.objects.values_list("id", flat=True).get(customer_id=customer_id, idempotency_key=key)
        self.capture_values["order_id"] = order_id
        mine, context = self.build(
            customer_id=customer_id, key=key, lines=[(sku, name, quantity, price)], now=order_params["created_at"]
        )
        mine.update(self.build_rest(context, order_id, event_id=event["event_id"]))
        volatile = {("insert_event", "created_at")}  # auto_now_add: a clock reading of its own
        for kind, params in mine.items():
            theirs = self.by_kind[kind]
            if kind in ("insert_order", "insert_items", "insert_event"):
                for column, a, b in zip(theirs.columns, _values(params), _values(theirs.params), strict=True):
                    if (kind, column) in volatile:
                        a, b = type(a), type(b)
                    if a != b:
                        raise RuntimeError(f"{kind}.{column}: bench builds {a!r}, Django sent {b!r}")
            elif params != theirs.params:
                raise RuntimeError(f"{kind}: bench builds {params!r}, Django sent {theirs.params!r}")

    def build(self, *, customer_id, key, lines, now=None) -> tuple[dict[str, list], dict]:
        """Parameters of the statements before the order id is known, for an order of `lines`
        [(sku, name, quantity, price)], computed as place_order computes them (request hash, total,
        expiry); and a context for `build_rest`."""
        from django.conf import settings
        from django.utils import timezone

        currency = settings.SHOP_CURRENCY
        now = now or timezone.now()
        expires_at = now + timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS)
        lines = sorted(lines)
        canonical = json.dumps([currency, [(sku, q, price) for sku, _, q, price in lines]])
        total = sum(q * price for _, _, q, price in lines)
        order_values = {
            "limit": settings.MAX_PENDING_ORDERS_PER_CUSTOMER, "customer_id": customer_id, "idempotency_key": key,
            "request_hash": hashlib.sha256(canonical.encode()).hexdigest(), "status": "PENDING_PAYMENT",
            "total_amount": total, "currency": currency, "expires_at": expires_at, "created_at": now,
            "paid_at": None, "cancelled_at": None,
        }  # fmt: skip
        out = {
            "select_prices": [sku for sku, *_ in lines],
            "insert_order": self._order_params(order_values),
            "update_stock": [lines[0][0] if slot == "sku" else lines[0][2] for slot in self.update_slots],
        }
        context = {"customer_id": customer_id, "lines": lines, "total": total, "currency": currency,
                   "expires_at": expires_at, "now": now}  # fmt: skip
        return out, context

    def _order_params(self, values: dict) -> list | dict:
        captured = self.by_kind["insert_order"]
        if isinstance(captured.params, dict):
            return {name: values[column] for name, column in zip(captured.params, captured.columns, strict=True)}
        return [values[c] for c in captured.columns]

    def replay_params(self, statement: Statement, *, sku: str, customer_id: int, key: str, order_id) -> list:
        """The parameters of a statement the bench does not know, for another order."""
        cap = self.capture_values
        new = {cap["sku"]: sku, cap["customer_id"]: customer_id, cap["key"]: key}
        if order_id is not None:
            new[cap["order_id"]] = order_id
            new[str(cap["order_id"])] = str(order_id)
        return [new.get(p, p) if isinstance(p, (str, int)) and not isinstance(p, bool) else p for p in statement.params]

    def build_rest(self, context: dict, order_id: int, event_id: uuid.UUID | None = None) -> dict[str, list]:
        """Parameters of the order_items INSERT (a row of values per line) and of the
        outbox_events INSERT (the payload as JSON text, cast to jsonb in the SQL)."""
        from django.core.serializers.json import DjangoJSONEncoder
        from django.utils import timezone

        lines = context["lines"]
        item_rows = [{"order_id": order_id, "sku": sku, "name": name, "quantity": q, "unit_price": price}
                     for sku, name, q, price in lines]  # fmt: skip
        payload = {
            "order_id": order_id, "customer_id": context["customer_id"],
            "items": [{"sku": sku, "name": name, "quantity": q, "unit_price": price} for sku, name, q, price in lines],
            "total": context["total"], "currency": context["currency"],
            "expires_at": context["expires_at"].isoformat(),
        }  # fmt: skip
        event_values = {
            "event_id": event_id or uuid.uuid4(), "aggregate_type": "order", "aggregate_id": str(order_id),
            "event_type": "OrderCreated", "payload": json.dumps(payload, cls=DjangoJSONEncoder),
            "created_at": timezone.now(), "request_id": "",  # no request: current_request_id() is ""
        }  # fmt: skip
        return {
            "insert_items": [row[c] for row in item_rows for c in self.by_kind["insert_items"].columns],
            "insert_event": [event_values[c] for c in self.by_kind["insert_event"].columns],
        }


# --- Runs ---------------------------------------------------------------------------------------


@dataclass
class RunResult:
    side: str
    orders: int
    seconds: float
    latencies: list[float]
    errors: list[str]
    cpu_seconds: float = 0.0  # CPU time of this whole process (all threads) during the run

    @property
    def cpu_ms_per_order(self) -> float:
        return self.cpu_seconds / self.orders * 1000 if self.orders else float("nan")

    @property
    def rate(self) -> float:
        return self.orders / self.seconds if self.seconds else 0.0

    def pct(self, p: float) -> float:
        values = sorted(self.latencies)
        return values[max(0, math.ceil(p / 100 * len(values)) - 1)] * 1000 if values else float("nan")


@dataclass(frozen=True)
class Job:
    customer_id: int
    key: str
    sku: str


def _run_threads(side: str, worker, jobs: list[Job], warm: list[Job], threads: int) -> RunResult:
    """`threads` threads, thread t taking jobs t, t + threads, ...; each does its warm-up jobs, then
    all start together; the run lasts from the common start to the last thread's last order."""
    gate = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    ends = [0.0] * threads

    def body(slot: int) -> None:
        try:
            worker(warm[slot::threads], jobs[slot::threads], gate, latencies[slot], errors, ends, slot)
        except BaseException as exc:  # noqa: BLE001 - reported below, never swallowed
            errors.append(f"thread {slot}: {exc!r}")
            gate.abort()

    pool = [threading.Thread(target=body, args=(slot,), name=f"{side}-{slot}", daemon=True) for slot in range(threads)]
    for t in pool:
        t.start()
    try:
        gate.wait()
    except threading.BrokenBarrierError:
        for t in pool:
            t.join()
        raise RuntimeError(f"{side}: a thread failed before the start: {errors[:3]}") from None
    began, cpu_began = time.perf_counter(), time.process_time()
    for t in pool:
        t.join()
    seconds, cpu = max(ends) - began, time.process_time() - cpu_began
    return RunResult(side, sum(len(x) for x in latencies), seconds, [v for x in latencies for v in x], errors, cpu)


STALE_RETRIES = [0]  # place_order calls retried after StaleCache


def _place_order(place_order, job: Job):
    """place_order as the API calls it: on StaleCache (the hot-cache generation moved, e.g. a product
    changed meanwhile) the caches are dropped and the call is made once more (HotCacheApiView)."""
    from config.hotcache import StaleCache, hot_cache

    try:
        return place_order(customer_id=job.customer_id, idempotency_key=job.key)
    except StaleCache:
        STALE_RETRIES[0] += 1
        hot_cache.clear()
        return place_order(customer_id=job.customer_id, idempotency_key=job.key)


def django_worker(warm, jobs, gate, latencies, errors, ends, slot) -> None:
    from django.db import connection

    from orders.services import place_order

    try:
        connection.ensure_connection()
        for job in warm:
            _place_order(place_order, job)
        gate.wait()
        clock = time.perf_counter
        for job in jobs:
            began = clock()
            try:
                placed = _place_order(place_order, job)
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                errors.append(repr(exc))
                continue
            latencies.append(clock() - began)
            if placed.replayed:
                errors.append(f"replayed order for {job.key}")
        ends[slot] = clock()
    finally:
        connection.close()


def make_psycopg_worker(checkout: CheckoutSQL):
    import psycopg
    from django.db import connection as django_connection

    settings_dict = django_connection.settings_dict
    conninfo = {
        "dbname": settings_dict["NAME"], "user": settings_dict["USER"], "password": settings_dict["PASSWORD"],
        "host": settings_dict["HOST"], "port": settings_dict["PORT"],
        "connect_timeout": settings_dict.get("OPTIONS", {}).get("connect_timeout"),
    }  # fmt: skip
    conninfo = {k: v for k, v in conninfo.items() if v not in (None, "")}
    sql = {kind: s.sql for kind, s in checkout.by_kind.items()}

    order = [(s.kind, s) for s in checkout.statements]  # as Django ran them

    def one_order(conn, cur, job: Job) -> None:
        """The captured statements in Django's order; the first statement opens the transaction."""
        params = rest = order_id = None
        for kind, statement in order:
            if kind not in CheckoutSQL.EXPECTED:
                replay = checkout.replay_params(
                    statement, sku=job.sku, customer_id=job.customer_id, key=job.key, order_id=order_id
                )
                cur.execute(statement.sql, replay)
                if cur.description is not None:
                    cur.fetchall()
            elif kind == "select_prices":
                cur.execute(sql[kind], [job.sku])
                priced = {row[0]: row for row in cur.fetchall()}  # (sku, name, price, is_active)
                _, name, price, active = priced[job.sku]
                if not active:
                    raise RuntimeError(f"{job.sku} inactive")
                params, context = checkout.build(customer_id=job.customer_id, key=job.key,
                                                 lines=[(job.sku, name, 1, price)])  # fmt: skip
            elif kind == "insert_order":
                cur.execute(sql[kind], params[kind])
                row = cur.fetchone()
                if row is None or row[-1] is None:  # RETURNING id, or (slot taken, order id)
                    raise RuntimeError(f"order {job.key} exists")
                order_id = row[-1]
                rest = checkout.build_rest(context, order_id)
            elif kind == "update_stock":
                cur.execute(sql[kind], params[kind])
                if cur.rowcount != 1:
                    raise RuntimeError(f"out of stock: {job.sku}")
            else:  # insert_items; insert_event, RETURNING id
                cur.execute(sql[kind], rest[kind])
                if cur.description is not None:
                    cur.fetchall()
        conn.commit()

    def worker(warm, jobs, gate, latencies, errors, ends, slot) -> None:
        with psycopg.connect(**conninfo, autocommit=False) as conn:
            cur = psycopg.ClientCursor(conn)  # as Django: parameters bound client-side
            for job in warm:
                try:
                    one_order(conn, cur, job)
                except Exception:
                    conn.rollback()
                    raise
            gate.wait()
            clock = time.perf_counter
            for job in jobs:
                began = clock()
                try:
                    one_order(conn, cur, job)
                except Exception as exc:  # noqa: BLE001
                    errors.append(repr(exc))
                    with contextlib.suppress(Exception):
                        conn.rollback()
                    continue
                latencies.append(clock() - began)
            ends[slot] = clock()

    return worker


# --- Statement count ----------------------------------------------------------------------------


def count_statements(customer_id: int, skus: list[str], k: int, key: str) -> tuple[int, int, list[str]]:
    """Statements of one checkout of a k-line cart, in autocommit mode (no surrounding transaction):
    (CaptureQueriesContext count, execute_wrapper count, what the wrapped statements do)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from orders.services import place_order

    assert not connection.in_atomic_block
    seen: list[tuple[str, bool]] = []

    def wrapper(execute, sql, params, many, context):
        seen.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    fill_carts([(customer_id, {sku: 1 for sku in skus[:k]})])
    with CaptureQueriesContext(connection) as ctx, connection.execute_wrapper(wrapper):
        place_order(customer_id=customer_id, idempotency_key=key)
    tables = _tables()
    kinds, in_transaction = [], False
    for sql, atomic in seen:
        statement = Statement(sql=sql, params=[])
        _classify(statement, tables)
        if atomic and not in_transaction:
            kinds.append("BEGIN")
        elif in_transaction and not atomic:
            kinds.append("COMMIT")
        in_transaction = atomic
        kinds.append(statement.kind + ("" if atomic else " (autocommit)"))
    if in_transaction:
        kinds.append("COMMIT")
    return len(ctx.captured_queries), len(seen), kinds


# --- Main ---------------------------------------------------------------------------------------


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the cleanup in main()


def main(argv=None) -> int:
    args = parse_args(argv)
    setup_django()
    from django.conf import settings
    from django.db import connection

    from shop.models import Product

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)

    db = connection.settings_dict
    print(
        f"checkout bench: {args.threads} threads, {args.orders} measured orders per run "
        f"(+{args.warmup} warm-up per thread), database {db['NAME']}@{db['HOST']}:{db['PORT']}, "
        f"Redis {settings.CACHES['default']['LOCATION']}, DEBUG={settings.DEBUG}"
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            print("another bench/checkout.py is running on this database", file=sys.stderr)
            return 2

    leftovers = cleanup()
    if leftovers["orders"]:
        print(f"removed leftovers of an earlier run: {leftovers}")

    warm_total = args.warmup * args.threads
    per_run = args.orders + warm_total
    scenarios = [s for s in "ab" if s in args.scenarios]
    skus = bench_skus(args.skus)
    t0 = time.perf_counter()
    # Each run reserves per_run units at most; cleanup gives them back.
    ensure_products([HOT_SKU, *skus], STOCK + 2 * args.rounds * per_run + 100)
    shoppers = ensure_shoppers(per_run + 1)
    products = Product.objects.filter(sku__in=[HOT_SKU, *skus], is_active=True).count()
    print(f"data ready in {time.perf_counter() - t0:.1f} s: {products} products, {len(shoppers)} shoppers")

    run_id = uuid.uuid4().hex[:8]
    rng = random.Random(args.seed)
    results: dict[str, dict[str, list[RunResult]]] = {}
    ok = True
    try:
        # 1. The SQL of a one-line checkout, from Django itself (quantity 2 to tell slots apart).
        capture_customer = shoppers[-1]
        capture_key = f"{PREFIX}{run_id}-capture"
        statements = capture_checkout(capture_customer, {skus[0]: 2}, capture_key)
        checkout = CheckoutSQL(statements, sku=skus[0], quantity=2, customer_id=capture_customer, key=capture_key)
        psycopg_worker = make_psycopg_worker(checkout)

        # 2. Statements per checkout of a k-line cart.
        counts = {}
        for k in (1, 3, 5):
            counts[k] = count_statements(capture_customer, skus[10:], k, f"{PREFIX}{run_id}-count-{k}")

        # 3. The two scenarios, Django then psycopg, same threads, same orders; rounds interleaved
        #    (a machine shared with other work drifts: each side gets the same share of it).
        picks = {
            scenario: [HOT_SKU] * per_run if scenario == "a" else [rng.choice(skus) for _ in range(per_run)]
            for scenario in scenarios
        }
        for n in range(args.rounds):
            for scenario in scenarios:
                for side in ("django", "psycopg"):
                    all_jobs = [
                        Job(shoppers[i], f"{PREFIX}{run_id}-{n}{scenario}-{side[0]}-{i}", picks[scenario][i])
                        for i in range(per_run)
                    ]
                    warm, jobs = all_jobs[:warm_total], all_jobs[warm_total:]
                    if side == "django":
                        fill_carts([(job.customer_id, {job.sku: 1}) for job in all_jobs])
                        result = _run_threads(side, django_worker, jobs, warm, args.threads)
                    else:
                        result = _run_threads(side, psycopg_worker, jobs, warm, args.threads)
                    results.setdefault(scenario, {}).setdefault(side, []).append(result)
    finally:
        done = cleanup()
        connection.close()

    # --- Report ---
    titles = {"a": "(a) 1 hot SKU", "b": f"(b) {args.skus} SKUs, random"}
    print()
    rounds = f"median of {args.rounds} interleaved runs" if args.rounds > 1 else "one run"
    print(f"place_order vs the same SQL through plain psycopg: {args.threads} threads, {args.orders} orders a run,")
    print(f"{rounds}. The psycopg side makes no Redis call (Django's also reads and clears the cart).")
    print("CPU ms/order: CPU time of this Python process (all threads) per order.")
    print(f"{'scenario':<24}{'side':<10}{'orders/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/order':>14}{'errors':>8}"
          f"   {'orders/s of each run':<}")  # fmt: skip
    for scenario, sides in results.items():
        median = {side: sorted(runs, key=lambda r: r.rate)[(len(runs) - 1) // 2] for side, runs in sides.items()}
        for i, (side, r) in enumerate(median.items()):
            label = titles[scenario] if i == 0 else ""
            each = " ".join(f"{run.rate:.0f}" for run in sides[side])
            errors = sum(len(run.errors) for run in sides[side])
            print(f"{label:<24}{side:<10}{r.rate:>10.0f}{r.pct(50):>9.2f}{r.pct(99):>9.2f}{r.cpu_ms_per_order:>14.2f}"
                  f"{errors:>8}   {each}")  # fmt: skip
        dj, pg = median["django"], median["psycopg"]
        ratio = dj.rate / pg.rate if pg.rate else 0.0
        each = " ".join(f"{d.rate / p.rate:.2f}" for d, p in zip(sides["django"], sides["psycopg"], strict=True))
        goal = GOALS[scenario]
        met = ratio >= goal
        ok &= met
        print(f"{'':<24}ratio django/psycopg = {ratio:.2f}  (goal >= {goal})  {'ok' if met else 'MISSED'}"
              f"   [each round: {each}]")  # fmt: skip
        for side, runs in sides.items():
            for error in [e for run in runs for e in run.errors][:3]:
                print(f"{'':<24}{side} error: {error}")
    if STALE_RETRIES[0]:
        print(f"({STALE_RETRIES[0]} place_order calls met StaleCache and were retried once, as the API does)")
    others = [s.sql[:70] for s in checkout.others]
    if others:
        print(f"statements replayed as captured on the psycopg side besides the five known: {others}")
    print()
    print("SQL statements per checkout of a k-line cart (one place_order in autocommit mode, i.e. outside any")
    print("transaction; execute_wrapper sees only cursor statements, so BEGIN and COMMIT are added to its count;")
    print("CaptureQueriesContext on Django 5.2 already logs BEGIN and COMMIT itself):")
    for k, (captured, wrapped, _kinds) in counts.items():
        total = wrapped + 2
        met = total <= k + STATEMENT_GOAL_EXTRA
        ok &= met
        print(
            f"  k={k}: execute_wrapper {wrapped} + BEGIN + COMMIT = {total}; CaptureQueriesContext {captured}"
            f"  (goal <= k + {STATEMENT_GOAL_EXTRA} = {k + STATEMENT_GOAL_EXTRA})  {'ok' if met else 'MISSED'}"
        )
    print(f"  k=1: {', '.join(counts[1][2])}")
    print()
    print(f"cleanup: {done['orders']} orders and {done['events']} outbox events deleted, "
          f"stock given back on {done['skus_restored']} SKUs")  # fmt: skip
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
