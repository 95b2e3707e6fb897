"""Expiry throughput: expire_unpaid_orders over 100,000 unpaid orders (issue 5, "What it must show").

    .venv/bin/python bench/expiry.py                                   # 100,000 orders, 200 SKUs, batches of 500
    .venv/bin/python bench/expiry.py --orders 100000 --skus 200 --batch-size 500
    .venv/bin/python bench/expiry.py --explain                         # + EXPLAIN ANALYZE of one batch first

On the development database (`shop`) it creates, in bulk (psycopg COPY, not place_order):
  - --skus products BENCH-EXP-001... (inactive, so no catalog shows them) with STOCK units each,
    a RECEIVED ledger entry of STOCK per SKU, and inventory rows with `reserved` = the units the
    bench orders hold and `available` = STOCK - reserved (stock conservation holds);
  - --orders PENDING_PAYMENT orders of one bench customer (user `bench-expiry`), each with 1-3
    items (distinct SKUs, quantity 1-3), all past `expires_at`.

The bench orders expire in the year 2000 and `expire_unpaid_orders(batch_size=..., now=...)` is
called with `now` just after the last of them: other pending orders in the dev database (say, those
of a checkout bench running at the same time) are never candidates, so the bench neither touches
them nor counts them. It then times the call: total wall time, orders/s, and the duration of every
batch transaction, measured from the outermost atomic block's start (set_autocommit(False)) to the
end of its COMMIT (so it includes the Python work between statements and the commit's WAL flush).
An execute_wrapper attributes the SQL time of each transaction to its statements.

Afterwards it verifies: every bench order CANCELLED, every bench SKU with reserved == 0 and
available == STOCK (and stock_audit difference 0), exactly one OrderCancelled outbox event per
order (and no other event). At the end - and at the start, after a run that was killed - it deletes
everything it created: outbox events, items, payments/refunds of the bench orders, the orders, the
stock movements, inventory rows and products of the BENCH-EXP- SKUs, and the bench user.

Goals: >= 5,000 orders/s and no transaction longer than 1 s.

--explain: before the timed run, one batch is run inside a transaction under CaptureQueriesContext,
then each captured statement is run again as EXPLAIN (ANALYZE, BUFFERS) in the same order, and
everything is rolled back (the bench orders stay pending for the timed run).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import re
import signal
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
import _harness  # noqa: E402  (bench/_harness.py)

PREFIX = "BENCH-EXP-"
USERNAME = "bench-expiry"
STOCK = 1_000_000  # units per SKU: available + reserved
BASE_EXPIRES_AT = datetime(2000, 1, 1, tzinfo=UTC)  # long past, and before any real order
GOAL_ORDERS_PER_S = 5000
GOAL_MAX_TXN_MS = 1000
LOCK_KEY = 0x42_45_58_50  # pg advisory lock: one expiry bench at a time on a database


def setup_django() -> None:
    _harness.setup_django(production_like=True)  # DEBUG off: no query logging


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--orders", type=int, default=100_000, help="pending orders to expire (default 100000)")
    p.add_argument("--skus", type=int, default=200, help="SKUs the orders are spread over (default 200)")
    p.add_argument("--batch-size", type=int, default=500, help="expire_unpaid_orders batch size (default 500)")
    p.add_argument("--seed", type=int, default=5, help="random seed of the order contents")
    p.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE one batch before the timed run")
    p.add_argument("--no-analyze", action="store_true", help="do not ANALYZE the tables after loading")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="cProfile the timed run and print its N costliest functions (slows it down)",
    )
    p.add_argument("--keep", action="store_true", help="leave the bench data in place at the end")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = p.parse_args(argv)
    if args.orders < 1 or args.skus < 3 or args.skus > 999 or args.batch_size < 1:
        p.error("need --orders >= 1, 3 <= --skus <= 999, --batch-size >= 1")
    return args


def bench_skus(count: int) -> list[str]:
    return [f"{PREFIX}{i:03d}" for i in range(1, count + 1)]


# --- Data ---------------------------------------------------------------------------------------


def cleanup() -> dict[str, int]:
    """Delete everything a run created (or a killed run left), in one transaction; idempotent."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from config.hotcache import bump_generation

    user_model = get_user_model()
    counts: dict[str, int] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        user_id = user_model.objects.filter(username=USERNAME).values_list("id", flat=True).first()
        if user_id is not None:
            bench_orders = "SELECT id FROM orders WHERE customer_id = %s"
            statements = [
                ("outbox_events", "DELETE FROM outbox_events WHERE aggregate_type = 'order' "
                                  "AND aggregate_id IN (SELECT id::text FROM orders WHERE customer_id = %s)"),
                ("refunds", f"DELETE FROM orders_refund WHERE order_id IN ({bench_orders})"),
                ("payments", f"DELETE FROM orders_payment WHERE order_id IN ({bench_orders})"),
                ("order_items", f"DELETE FROM order_items WHERE order_id IN ({bench_orders})"),
                ("orders", "DELETE FROM orders WHERE customer_id = %s"),
                ("pending_slots", "DELETE FROM order_pending_counts WHERE customer_id = %s"),
            ]  # fmt: skip
            for name, sql in statements:
                cursor.execute(sql, [user_id])
                counts[name] = cursor.rowcount
        like = PREFIX + "%"
        for name, sql in [
            ("stock_movements", "DELETE FROM inventory_stockmovement WHERE sku LIKE %s"),
            ("inventory", "DELETE FROM inventory WHERE sku LIKE %s"),
            ("products", "DELETE FROM shop_product WHERE sku LIKE %s"),
        ]:
            cursor.execute(sql, [like])
            counts[name] = cursor.rowcount
        if counts["products"]:
            transaction.on_commit(bump_generation)  # raw deletes send no signals
        if user_id is not None:
            user_model.objects.filter(id=user_id).delete()  # with its token, if any; signals bump the caches
            counts["users"] = 1
    return counts


def create_data(args, rng: random.Random) -> tuple[int, list[int], dict[str, int], datetime]:
    """Products, stock, ledger, the bench customer and its expired orders with items, in bulk.
    Returns (customer id, order ids, units reserved per SKU, the `now` to expire them at)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connection, transaction

    from inventory.models import Stock, StockMovement
    from orders.models import OrderStatus
    from shop.models import Product

    skus = bench_skus(args.skus)
    prices = {sku: 1000 + 10 * i for i, sku in enumerate(skus, start=1)}
    names = {sku: f"Bench expiry {sku.removeprefix(PREFIX)}" for sku in skus}
    currency = settings.SHOP_CURRENCY
    with transaction.atomic():
        user = get_user_model().objects.create(username=USERNAME, password=make_password(None), is_active=True)
        Product.objects.bulk_create(
            [Product(sku=sku, name=names[sku], price=prices[sku], is_active=False) for sku in skus]
        )
        StockMovement.objects.bulk_create(
            [StockMovement(product_id=sku, delta=STOCK, reason=StockMovement.Reason.RECEIVED, note="bench expiry")
             for sku in skus]
        )  # fmt: skip

        with connection.cursor() as cursor:
            cursor.execute("SELECT nextval(pg_get_serial_sequence('orders', 'id')) FROM generate_series(1, %s)",
                           [args.orders])  # fmt: skip
            order_ids = sorted(row[0] for row in cursor.fetchall())

        reserved: dict[str, int] = defaultdict(int)
        order_rows, item_rows = [], []
        run = os.urandom(4).hex()
        for n, order_id in enumerate(order_ids):
            lines = rng.sample(skus, rng.randint(1, 3))
            total = 0
            for sku in lines:
                quantity = rng.randint(1, 3)
                reserved[sku] += quantity
                total += quantity * prices[sku]
                item_rows.append((order_id, sku, names[sku], quantity, prices[sku]))
            expires_at = BASE_EXPIRES_AT + timedelta(milliseconds=n)
            order_rows.append((
                order_id, f"bench-exp-{run}-{n}", "0" * 64, OrderStatus.PENDING_PAYMENT, total, currency,
                expires_at, expires_at - timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS), user.id,
            ))  # fmt: skip

        Stock.objects.bulk_create(
            [Stock(product_id=sku, available=STOCK - reserved[sku], reserved=reserved[sku]) for sku in skus]
        )
        with connection.cursor() as cursor:
            raw = cursor.cursor  # the psycopg cursor under Django's wrapper
            with raw.copy(
                "COPY orders (id, idempotency_key, request_hash, status, total_amount, currency, "
                "expires_at, created_at, customer_id) FROM STDIN"
            ) as copy:
                for row in order_rows:
                    copy.write_row(row)
            with raw.copy("COPY order_items (order_id, sku, name, quantity, unit_price) FROM STDIN") as copy:
                for row in item_rows:
                    copy.write_row(row)
    expire_now = BASE_EXPIRES_AT + timedelta(milliseconds=len(order_ids), seconds=1)
    return user.id, order_ids, dict(reserved), expire_now


def analyze_tables() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE orders, order_items, inventory, outbox_events")


# --- Timing -------------------------------------------------------------------------------------


def statement_kind(sql: str) -> str:
    text = " ".join(sql.split()).upper()
    if text.startswith("SELECT") and '"ORDERS"' in text and "FOR UPDATE" in text:
        return "1 SELECT orders FOR UPDATE SKIP LOCKED"
    if text.startswith("UPDATE ORDERS"):
        return "2 UPDATE orders SET CANCELLED"
    if text.startswith("SELECT SKU FROM INVENTORY"):
        return "3 SELECT inventory FOR UPDATE"
    if text.startswith("UPDATE INVENTORY"):
        return "4 UPDATE inventory (per-SKU sums)"
    if text.startswith('INSERT INTO "OUTBOX_EVENTS"'):
        return "5 INSERT outbox_events"
    return "9 other: " + text[:60]


class TxnTimer:
    """Times each outermost transaction of `conn`, from set_autocommit(False) (the start of the
    outermost atomic block) to the return of commit()/rollback(), and attributes SQL time to
    statements with an execute_wrapper."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.txns: list[dict] = []
        self._current: dict | None = None
        self._saved: dict[str, object] = {}

    def __enter__(self) -> TxnTimer:
        conn = self.conn
        for name in ("set_autocommit", "commit", "rollback"):
            self._saved[name] = getattr(conn, name)
        orig_set_autocommit, orig_commit, orig_rollback = (
            self._saved["set_autocommit"], self._saved["commit"], self._saved["rollback"])  # fmt: skip

        def set_autocommit(autocommit, *a, **kw):
            if not autocommit and self._current is None:
                self._current = {"start": time.perf_counter(), "sql": defaultdict(float), "orders": 0, "queries": 0}
            return orig_set_autocommit(autocommit, *a, **kw)

        def finish(orig, outcome):
            def end(*a, **kw):
                began = time.perf_counter()
                try:
                    return orig(*a, **kw)
                finally:
                    current, self._current = self._current, None
                    if current is not None:
                        current["sql"][f"6 {outcome.upper()}"] += (time.perf_counter() - began) * 1000
                        current["ms"] = (time.perf_counter() - current.pop("start")) * 1000
                        current["outcome"] = outcome
                        self.txns.append(current)

            return end

        conn.set_autocommit = set_autocommit
        conn.commit = finish(orig_commit, "commit")
        conn.rollback = finish(orig_rollback, "rollback")
        self._wrapper_cm = conn.execute_wrapper(self._wrap)
        self._wrapper_cm.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._wrapper_cm.__exit__(*exc)
        for name in self._saved:
            delattr(self.conn, name)  # back to the class's methods

    def _wrap(self, execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if self._current is not None:
                kind = statement_kind(sql)
                self._current["sql"][kind] += (time.perf_counter() - began) * 1000
                self._current["queries"] += 1
                if kind.startswith("2 "):
                    self._current["orders"] += max(context["cursor"].rowcount, 0)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# --- EXPLAIN ------------------------------------------------------------------------------------


def shorten(sql: str) -> str:
    """A statement or plan line with its long literal lists (ids, UNNEST arrays) elided."""
    text = " ".join(sql.split())
    text = re.sub(r"'\{([^']{120,})\}'", lambda m: f"'{{...{m.group(1).count(',') + 1} values...}}'", text)
    text = re.sub(r"ARRAY\[([^\]]{120,})\]", lambda m: f"ARRAY[...{m.group(1).count(',') + 1} values...]", text)
    return re.sub(r"IN \(([^()]{120,})\)", lambda m: f"IN (...{m.group(1).count(',') + 1} values...)", text)


def explain_one_batch(batch_size: int, now: datetime) -> None:
    """Run one batch of expire_unpaid_orders under CaptureQueriesContext, then EXPLAIN (ANALYZE,
    BUFFERS) each captured statement again, in order, in one transaction that is rolled back."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from orders.services.cancellation import expire_unpaid_orders

    class Rollback(Exception):
        pass

    # The service loops until a short batch: a `now` that exactly batch_size bench orders are past
    # gives one full batch and one empty one.
    one_batch_now = min(now, BASE_EXPIRES_AT + timedelta(milliseconds=batch_size - 1))
    print(f"\n=== EXPLAIN ANALYZE of one batch of {batch_size} (then rolled back) ===")
    with contextlib.suppress(Rollback), transaction.atomic():
        sid = transaction.savepoint()
        with CaptureQueriesContext(connection) as ctx:
            began = time.perf_counter()
            expired = expire_unpaid_orders(batch_size=batch_size, now=one_batch_now)
            elapsed = (time.perf_counter() - began) * 1000
        print(f"one batch ({expired} orders, + the empty check) ran in {elapsed:.1f} ms (savepoints, no commit):")
        for q in ctx.captured_queries:
            print(f"  {float(q['time']) * 1000:8.1f} ms  {shorten(q['sql'])[:150]}")
        statements = [q["sql"] for q in ctx.captured_queries
                      if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE", "ROLLBACK"))]  # fmt: skip
        transaction.savepoint_rollback(sid)  # undo the batch, then replay it under EXPLAIN ANALYZE
        with connection.cursor() as cursor:
            for sql in statements:
                print(f"\n--- {shorten(sql)[:1000]}")
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                for (line,) in cursor.fetchall():
                    print("   ", line if len(line) < 200 else line[: len(line) - len(line.lstrip())] + shorten(line))
        raise Rollback


# --- Main ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    setup_django()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    from django.db import connection, connections

    from inventory.services import stock_audit
    from orders.models import Order, OrderStatus
    from orders.services.cancellation import expire_unpaid_orders

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            print("another bench/expiry.py is running on this database", file=sys.stderr)
            return 2

    leftovers = cleanup()
    if any(leftovers.values()):
        print(f"removed leftovers of an earlier run: {leftovers}")

    ok = True
    try:
        rng = random.Random(args.seed)
        t0 = time.perf_counter()
        customer_id, order_ids, reserved, expire_now = create_data(args, rng)
        print(f"data created in bulk (COPY) and committed in {time.perf_counter() - t0:.1f} s")
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM order_items WHERE order_id IN "
                           "(SELECT id FROM orders WHERE customer_id = %s)", [customer_id])  # fmt: skip
            items = cursor.fetchone()[0]
        if not args.no_analyze:
            t1 = time.perf_counter()
            analyze_tables()
            print(f"ANALYZE orders, order_items, inventory, outbox_events in {time.perf_counter() - t1:.1f} s")
        print(
            f"{len(order_ids):,} PENDING_PAYMENT orders with {items:,} items "
            f"over {args.skus} SKUs ({sum(reserved.values()):,} units reserved), customer {USERNAME} (id {customer_id})"
        )
        foreign = Order.objects.pending_expired(expire_now).exclude(customer_id=customer_id).count()
        other_pending = Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).exclude(
            customer_id=customer_id).count()  # fmt: skip
        print(f"other PENDING_PAYMENT orders in the database: {other_pending:,} "
              f"(candidates at the bench's `now` = {expire_now.isoformat()}: {foreign})")  # fmt: skip

        if args.explain:
            explain_one_batch(args.batch_size, expire_now)
            print()

        # --- the timed run
        with TxnTimer(connections["default"]) as timer:
            profiler = None
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            began = time.perf_counter()
            expired = expire_unpaid_orders(batch_size=args.batch_size, now=expire_now)
            total_s = time.perf_counter() - began
            if profiler is not None:
                profiler.disable()
        txns = timer.txns
        batches = [t for t in txns if t["orders"]]
        durations = [t["ms"] for t in txns]
        batch_ms = [t["ms"] for t in batches]
        rate = expired / total_s if total_s else 0.0
        longest = max(txns, key=lambda t: t["ms"])
        longest_idx = txns.index(longest)

        print(f"\n=== expire_unpaid_orders(batch_size={args.batch_size}) over {len(order_ids):,} orders, "
              f"{args.skus} SKUs ===")  # fmt: skip
        print(f"expired (returned):       {expired:,}")
        print(f"total time:               {total_s:.2f} s")
        print(f"orders/s:                 {rate:,.0f}   (goal >= {GOAL_ORDERS_PER_S:,})")
        print(f"batches:                  {len(batches)} ({len(txns)} transactions incl. the final empty check)")
        print(f"longest transaction:      {longest['ms']:.1f} ms (#{longest_idx + 1}, {longest['orders']} orders)"
              f"   (goal < {GOAL_MAX_TXN_MS} ms)")  # fmt: skip
        print(f"transaction p50/p90/p99:  {pct(batch_ms, 50):.1f} / {pct(batch_ms, 90):.1f} / "
              f"{pct(batch_ms, 99):.1f} ms (batches)")  # fmt: skip
        print(f"in transactions:          {sum(durations) / 1000:.2f} s of {total_s:.2f} s")
        if batches:
            k = max(1, min(10, len(batches) // 4))
            print(f"first {k} batches avg:     {statistics.mean(batch_ms[:k]):.1f} ms;  "
                  f"last {k} batches avg: {statistics.mean(batch_ms[-k:]):.1f} ms")  # fmt: skip
            kinds = sorted({kind for t in batches for kind in t["sql"]})
            print("per batch, mean ms by statement (SQL round-trip as seen by Django):")
            sql_total = 0.0
            for kind in kinds:
                values = [t["sql"].get(kind, 0.0) for t in batches]
                sql_total += statistics.mean(values)
                print(f"  {kind[2:]:<40} {statistics.mean(values):7.1f}  (max {max(values):.1f})")
            mean_txn = statistics.mean(batch_ms)
            print(f"  {'Python (rest of the transaction)':<40} {mean_txn - sql_total:7.1f}")
            print(f"  {'whole transaction':<40} {mean_txn:7.1f}")

        if profiler is not None:
            import pstats

            print(f"\n=== cProfile of the timed run (under the profiler; top {args.profile} by own time) ===")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
            print(f"=== the same, top {args.profile} by cumulative time ===")
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)

        # --- verification
        print("\n=== verification ===")
        with connection.cursor() as cursor:
            cursor.execute("SELECT status, count(*) FROM orders WHERE customer_id = %s GROUP BY status",
                           [customer_id])  # fmt: skip
            statuses = dict(cursor.fetchall())
            all_cancelled = statuses == {OrderStatus.CANCELLED: len(order_ids)}
            cursor.execute(
                "SELECT sku, available, reserved, shipped FROM inventory WHERE sku LIKE %s ORDER BY sku", [PREFIX + "%"]
            )
            stock_rows = cursor.fetchall()
            bad_stock = [r for r in stock_rows if r[2] != 0 or r[1] != STOCK or r[3] != 0]
            cursor.execute(
                """
                SELECT count(*) FILTER (WHERE event_type = 'OrderCancelled'),
                       count(DISTINCT aggregate_id) FILTER (WHERE event_type = 'OrderCancelled'),
                       count(*) FILTER (WHERE event_type <> 'OrderCancelled'),
                       count(*) FILTER (WHERE event_type = 'OrderCancelled' AND payload->>'reason' = 'expired'
                                        AND (payload->>'customer_id')::bigint = %s
                                        AND payload->>'order_id' = aggregate_id)
                FROM outbox_events
                WHERE aggregate_type = 'order'
                  AND aggregate_id IN (SELECT id::text FROM orders WHERE customer_id = %s)
                """,
                [customer_id, customer_id],
            )
            events, distinct_events, other_events, well_formed = cursor.fetchone()
        audit = stock_audit(skus=bench_skus(args.skus))
        unbalanced = [row for row in audit if row["difference"] != 0]
        checks = [
            (f"expire_unpaid_orders returned {expired:,} (= bench orders {len(order_ids):,})",
             expired == len(order_ids)),
            (f"bench orders by status: {statuses}", all_cancelled),
            (f"{len(stock_rows)} bench SKUs: reserved == 0 and available == {STOCK:,} "
             f"({len(bad_stock)} wrong{': ' + str(bad_stock[:3]) if bad_stock else ''})",
             len(stock_rows) == args.skus and not bad_stock),
            (f"stock_audit difference 0 on every bench SKU ({len(unbalanced)} unbalanced)", not unbalanced),
            (f"OrderCancelled events: {events:,} for {distinct_events:,} orders, {well_formed:,} well formed, "
             f"{other_events} other events", events == distinct_events == well_formed == len(order_ids)
             and not other_events),
        ]  # fmt: skip
        for text, passed in checks:
            print(f"  [{'ok' if passed else 'FAIL'}] {text}")
            ok &= passed

        goals = [
            (f"orders/s {rate:,.0f} >= {GOAL_ORDERS_PER_S:,}", rate >= GOAL_ORDERS_PER_S),
            (f"longest transaction {longest['ms']:.1f} ms < {GOAL_MAX_TXN_MS} ms", longest["ms"] < GOAL_MAX_TXN_MS),
        ]
        print("\n=== goals ===")
        for text, passed in goals:
            print(f"  [{'met' if passed else 'MISSED'}] {text}")
        goals_met = all(passed for _, passed in goals)
    finally:
        if args.keep:
            print("\n--keep: bench data left in place (the next run removes it first)")
        else:
            t1 = time.perf_counter()
            removed = cleanup()
            print(f"\ncleanup in {time.perf_counter() - t1:.1f} s: {removed}")
    if not ok:
        return 1
    if args.check and not goals_met:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
