"""Expiry throughput: expire_unpaid_orders over 100,000 unpaid orders (issue 5; bench/README.md).

    python -m bench.expiry                                    # 100,000 orders, 200 SKUs, batches of 500
    python -m bench.expiry --orders 20000 --skus 200 --batch-size 500 [--profile 20]

Creates in bulk (COPY) inactive products BENCH-EXP-001... and PENDING_PAYMENT orders of user
bench-expiry that expired in the year 2000, times expire_unpaid_orders(now=just after the last of
them) with every batch transaction timed (set_autocommit(False) to the end of COMMIT), verifies
the outcome and deletes it all. Goals: >= 5,000 orders/s and no transaction longer than 1 s."""

import contextlib
import cProfile
import pstats
import random
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from unittest import mock

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connection, connections, transaction

from bench import harness as h

PREFIX = "BENCH-EXP-"
USERNAME = "bench-expiry"
STOCK = 1_000_000  # units per SKU: available + reserved
BASE_EXPIRES_AT = datetime(2000, 1, 1, tzinfo=UTC)  # long past, and before any real order
GOAL_ORDERS_PER_S = 5000
GOAL_MAX_TXN_MS = 1000
LOCK_KEY = 0x42_45_58_50  # pg advisory lock: one expiry bench at a time on a database


def parse_args(argv=None):
    p = h.parser(__doc__, orders=(100_000, "pending orders to expire"), skus=(200, "SKUs the orders are spread over"),
                 batch_size=(500, "expire_unpaid_orders batch size"), seed=(5, "random seed of the order contents"),
                 profile=(0, "cProfile the timed run, print its PROFILE costliest functions (slows it down)"),
                 no_analyze=(False, "do not ANALYZE the tables after loading"),
                 keep=(False, "leave the bench data in place at the end"), check=h.SHARED["check"])  # fmt: skip
    args = p.parse_args(argv)
    if args.orders < 1 or args.skus < 3 or args.skus > 999 or args.batch_size < 1:
        p.error("need --orders >= 1, 3 <= --skus <= 999, --batch-size >= 1")
    return args


def cleanup() -> dict[str, int]:
    """Delete everything a run created (or a killed run left); idempotent."""
    users = get_user_model().objects.filter(username=USERNAME)
    ids = list(users.values_list("id", flat=True))
    counts = {**h.delete_orders(ids), **h.delete_products(PREFIX), "users": len(ids)}
    users.delete()  # with its token, if any; signals bump the caches
    return counts


def create_data(args, rng: random.Random) -> tuple[int, list[int], dict[str, int], datetime]:
    """Products, stock, ledger, the bench customer and its expired orders with items, in bulk.
    Returns (customer id, order ids, units reserved per SKU, the `now` to expire them at)."""
    from inventory.models import Stock, StockMovement
    from orders.models import OrderStatus
    from shop.models import Product

    skus = [f"{PREFIX}{i:03d}" for i in range(1, args.skus + 1)]
    prices = {sku: 1000 + 10 * i for i, sku in enumerate(skus, start=1)}
    names = {sku: f"Bench expiry {sku.removeprefix(PREFIX)}" for sku in skus}
    with transaction.atomic(), connection.cursor() as cursor:
        user = get_user_model().objects.create(username=USERNAME, password=make_password(None), is_active=True)
        Product.objects.bulk_create([Product(sku=s, name=names[s], price=prices[s], is_active=False) for s in skus])
        StockMovement.objects.bulk_create([StockMovement(product_id=sku, delta=STOCK, note="bench expiry",
                                                         reason=StockMovement.Reason.RECEIVED) for sku in skus])
        cursor.execute("SELECT nextval(pg_get_serial_sequence('orders', 'id')) FROM generate_series(1, %s)",
                       [args.orders])  # fmt: skip
        order_ids = sorted(row[0] for row in cursor.fetchall())
        reserved: dict[str, int] = defaultdict(int)
        order_rows, item_rows = [], []
        run = random.getrandbits(32)
        for n, order_id in enumerate(order_ids):
            total = 0
            for sku in rng.sample(skus, rng.randint(1, 3)):
                quantity = rng.randint(1, 3)
                reserved[sku] += quantity
                total += quantity * prices[sku]
                item_rows.append((order_id, sku, names[sku], quantity, prices[sku]))
            expires_at = BASE_EXPIRES_AT + timedelta(milliseconds=n)
            order_rows.append((order_id, f"bench-exp-{run:08x}-{n}", "0" * 64, OrderStatus.PENDING_PAYMENT, total,
                               settings.SHOP_CURRENCY, expires_at,
                               expires_at - timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS), user.id))
        Stock.objects.bulk_create([Stock(product_id=s, available=STOCK - reserved[s], reserved=reserved[s])
                                   for s in skus])  # fmt: skip
        for sql, rows in (("COPY orders (id, idempotency_key, request_hash, status, total_amount, currency, "
                           "expires_at, created_at, customer_id) FROM STDIN", order_rows),
                          ("COPY order_items (order_id, sku, name, quantity, unit_price) FROM STDIN", item_rows)):
            with cursor.cursor.copy(sql) as copy:  # the psycopg cursor under Django's wrapper
                for row in rows:
                    copy.write_row(row)
    return user.id, order_ids, dict(reserved), BASE_EXPIRES_AT + timedelta(milliseconds=len(order_ids), seconds=1)


STATEMENT_KINDS = [  # (what a statement starts with, what it contains), kind
    (("SELECT", "FOR UPDATE SKIP LOCKED"), "1 SELECT orders FOR UPDATE SKIP LOCKED"),
    (("UPDATE ORDERS", ""), "2 UPDATE orders SET CANCELLED"),
    (("SELECT ORDER_ITEMS", "SUM("), "3 SELECT order_items (per-SKU sums)"),
    (("SELECT INVENTORY", "FOR UPDATE"), "4 SELECT inventory FOR UPDATE"),
    (("UPDATE INVENTORY", ""), "5 UPDATE inventory"),
    (("INSERT INTO OUTBOX_EVENTS", ""), "6 INSERT outbox_events"),
    (("UPDATE ORDER_PENDING_COUNTS", ""), "7 UPDATE order_pending_counts"),
]


def statement_kind(sql: str) -> str:
    text = " ".join(sql.replace('"', "").split()).upper()
    return next((kind for (start, part), kind in STATEMENT_KINDS if text.startswith(start) and part in text),
                "9 other: " + text[:60])  # fmt: skip


@contextlib.contextmanager
def timed_transactions(conn, txns: list[dict]):
    """Times each outermost transaction of `conn` into `txns`, from set_autocommit(False) (the start of
    the outermost atomic block) to the return of commit()/rollback(), its SQL time by statement kind."""
    current: dict = {}

    def begin(autocommit, *a, **kw):
        if not autocommit and not current:
            current.update(start=time.perf_counter(), sql=defaultdict(float), orders=0)
        return set_autocommit(autocommit, *a, **kw)

    def end(original, outcome):
        def call(*a, **kw):
            began = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                if current:
                    current["sql"][f"8 {outcome}"] += (time.perf_counter() - began) * 1000
                    txns.append({**current, "ms": (time.perf_counter() - current["start"]) * 1000})
                    current.clear()

        return call

    def wrap(execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if current:
                current["sql"][kind := statement_kind(sql)] += (time.perf_counter() - began) * 1000
                current["orders"] += max(context["cursor"].rowcount, 0) if kind.startswith("2 ") else 0

    set_autocommit = conn.set_autocommit
    with (mock.patch.object(conn, "set_autocommit", begin), conn.execute_wrapper(wrap),
          mock.patch.object(conn, "commit", end(conn.commit, "COMMIT")),
          mock.patch.object(conn, "rollback", end(conn.rollback, "ROLLBACK"))):  # fmt: skip
        yield


def verify(args, expired: int, customer_id: int, order_ids: list[int]) -> bool:
    from inventory.services import stock_audit

    with connection.cursor() as cursor:
        cursor.execute("SELECT status, count(*) FROM orders WHERE customer_id = %s GROUP BY status", [customer_id])
        statuses = dict(cursor.fetchall())
        cursor.execute("SELECT sku, available, reserved, shipped FROM inventory WHERE sku LIKE %s ORDER BY sku",
                       [PREFIX + "%"])  # fmt: skip
        stock_rows = cursor.fetchall()
        bad_stock = [r for r in stock_rows if r[2] != 0 or r[1] != STOCK or r[3] != 0]
        cursor.execute("""
            SELECT count(*) FILTER (WHERE event_type = 'OrderCancelled'),
                   count(DISTINCT aggregate_id) FILTER (WHERE event_type = 'OrderCancelled'),
                   count(*) FILTER (WHERE event_type <> 'OrderCancelled'),
                   count(*) FILTER (WHERE event_type = 'OrderCancelled' AND payload->>'reason' = 'expired'
                                    AND (payload->>'customer_id')::bigint = %s AND payload->>'order_id' = aggregate_id)
            FROM outbox_events WHERE aggregate_type = 'order'
              AND aggregate_id IN (SELECT id::text FROM orders WHERE customer_id = %s)""",
                       [customer_id, customer_id])  # fmt: skip
        events, distinct_events, other_events, well_formed = cursor.fetchone()
    unbalanced = [r for r in stock_audit(skus=[f"{PREFIX}{i:03d}" for i in range(1, args.skus + 1)]) if r["difference"]]
    checks = [
        (f"expire_unpaid_orders returned {expired:,} (= bench orders {len(order_ids):,})", expired == len(order_ids)),
        (f"bench orders by status: {statuses}", statuses == {"CANCELLED": len(order_ids)}),
        (f"{len(stock_rows)} bench SKUs: reserved == 0 and available == {STOCK:,} "
         f"({len(bad_stock)} wrong{': ' + str(bad_stock[:3]) if bad_stock else ''})",
         len(stock_rows) == args.skus and not bad_stock),
        (f"stock_audit difference 0 on every bench SKU ({len(unbalanced)} unbalanced)", not unbalanced),
        (f"OrderCancelled events: {events:,} for {distinct_events:,} orders, {well_formed:,} well formed, "
         f"{other_events} other events",
         events == distinct_events == well_formed == len(order_ids) and not other_events),
    ]  # fmt: skip
    return h.print_checks(checks, "=== verification ===", no="FAIL")


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    from orders.models import Order, OrderStatus
    from orders.services import expire_unpaid_orders

    lock = h.lock_or_exit(LOCK_KEY, "expiry")
    h.leftovers(cleanup())
    ok = goals_met = True
    try:
        t0 = time.perf_counter()
        customer_id, order_ids, reserved, expire_now = create_data(args, random.Random(args.seed))
        print(f"data created in bulk (COPY) and committed in {time.perf_counter() - t0:.1f} s")
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM order_items WHERE order_id IN "
                           "(SELECT id FROM orders WHERE customer_id = %s)", [customer_id])  # fmt: skip
            items = cursor.fetchone()[0]
            if not args.no_analyze:
                t1 = time.perf_counter()
                cursor.execute("ANALYZE orders, order_items, inventory, outbox_events")
                print(f"ANALYZE orders, order_items, inventory, outbox_events in {time.perf_counter() - t1:.1f} s")
        print(f"{len(order_ids):,} PENDING_PAYMENT orders with {items:,} items over {args.skus} SKUs "
              f"({sum(reserved.values()):,} units reserved), customer {USERNAME} (id {customer_id})")  # fmt: skip
        others = Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).exclude(customer_id=customer_id)
        print(f"other PENDING_PAYMENT orders in the database: {others.count():,} (candidates at the bench's `now` = "
              f"{expire_now.isoformat()}: {others.filter(expires_at__lte=expire_now).count()})")  # fmt: skip
        profiler = cProfile.Profile() if args.profile else contextlib.nullcontext()
        with timed_transactions(connections["default"], txns := []), profiler:
            began = time.perf_counter()
            expired = expire_unpaid_orders(batch_size=args.batch_size, now=expire_now)
            total_s = time.perf_counter() - began
        batches = [t for t in txns if t["orders"]]
        batch_ms = [t["ms"] for t in batches]
        rate = expired / total_s if total_s else 0.0
        longest = max(txns, key=lambda t: t["ms"])
        print(f"\n=== expire_unpaid_orders(batch_size={args.batch_size}) over {len(order_ids):,} orders, "
              f"{args.skus} SKUs ===")  # fmt: skip
        print(f"expired (returned):       {expired:,}")
        print(f"total time:               {total_s:.2f} s")
        print(f"orders/s:                 {rate:,.0f}   (goal >= {GOAL_ORDERS_PER_S:,})")
        print(f"batches:                  {len(batches)} ({len(txns)} transactions incl. the final empty check)")
        print(f"longest transaction:      {longest['ms']:.1f} ms (#{txns.index(longest) + 1}, {longest['orders']} "
              f"orders)   (goal < {GOAL_MAX_TXN_MS} ms)")  # fmt: skip
        print("transaction p50/p90/p99:  " + " / ".join(f"{h.pct(batch_ms, p):.1f}" for p in (50, 90, 99))
              + " ms (batches)")  # fmt: skip
        print(f"in transactions:          {sum(t['ms'] for t in txns) / 1000:.2f} s of {total_s:.2f} s")
        if batches:
            k = max(1, min(10, len(batches) // 4))
            print(f"first {k} batches avg:     {statistics.mean(batch_ms[:k]):.1f} ms;  "
                  f"last {k} batches avg: {statistics.mean(batch_ms[-k:]):.1f} ms")  # fmt: skip
            print("per batch, mean ms by statement (SQL round-trip as seen by Django):")
            sql_total = 0.0
            for kind in sorted({kind for t in batches for kind in t["sql"]}):
                values = [t["sql"].get(kind, 0.0) for t in batches]
                sql_total += statistics.mean(values)
                print(f"  {kind[2:]:<40} {statistics.mean(values):7.1f}  (max {max(values):.1f})")
            print(f"  {'Python (rest of the transaction)':<40} {statistics.mean(batch_ms) - sql_total:7.1f}")
            print(f"  {'whole transaction':<40} {statistics.mean(batch_ms):7.1f}")
        for order in ("tottime", "cumulative") if args.profile else ():
            print(f"\n=== cProfile of the timed run (under the profiler), top {args.profile} by {order} ===")
            pstats.Stats(profiler).sort_stats(order).print_stats(args.profile)
        ok = verify(args, expired, customer_id, order_ids)
        goals_met = h.print_checks([
            (f"orders/s {rate:,.0f} >= {GOAL_ORDERS_PER_S:,}", rate >= GOAL_ORDERS_PER_S),
            (f"longest transaction {longest['ms']:.1f} ms < {GOAL_MAX_TXN_MS} ms", longest["ms"] < GOAL_MAX_TXN_MS),
        ], "=== goals ===", yes="met")  # fmt: skip
    finally:
        if args.keep:
            print("\n--keep: bench data left in place (the next run removes it first)")
        else:
            t1, removed = time.perf_counter(), cleanup()
            print(f"\ncleanup in {time.perf_counter() - t1:.1f} s: {removed}")
        lock.close()
    return 1 if not ok or (args.check and not goals_met) else 0

if __name__ == "__main__":
    sys.exit(main())
