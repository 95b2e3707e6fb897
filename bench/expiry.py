"""expire_unpaid_orders over expired unpaid orders: orders/s, the longest transaction (bench/README.md).

python -m bench.expiry [--orders 20000 --skus 200 --batch-size 500]"""

import contextlib
import random
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
from inventory.models import Stock, StockMovement
from inventory.services import stock_audit
from orders.models import OrderStatus
from orders.services import expire_unpaid_orders
from shop.models import Product

PREFIX, USERNAME = "BENCH-EXP-", "bench-expiry"  # the bench's SKUs and customer
STOCK = 1_000_000  # units per SKU: available + reserved
BASE_EXPIRES_AT = datetime(2000, 1, 1, tzinfo=UTC)  # long past, and before any real order
GOAL_ORDERS_PER_S, GOAL_MAX_TXN_MS = 5000, 1000


def parse_args(argv=None):
    return h.parse(
        argv,
        __doc__,
        orders=(100_000, "pending orders to expire"),
        skus=(200, "SKUs the orders are spread over"),
        batch_size=(500, "expire_unpaid_orders batch size"),
        keep=(False, "leave the bench data in place at the end"),
        check=h.SHARED["check"],
        valid=lambda a: a.orders >= 1 and 3 <= a.skus <= 999 and a.batch_size >= 1,
        error="need --orders >= 1, 3 <= --skus <= 999, --batch-size >= 1",
    )


def cleanup() -> None:
    users = get_user_model().objects.filter(username=USERNAME)
    h.delete_orders(list(users.values_list("id", flat=True)))
    h.delete_products(PREFIX)
    users.delete()  # with its token, if any; signals bump the caches


def create_data(args, rng: random.Random) -> tuple[int, list[int], int, int, datetime]:
    """Products, stock, ledger, the bench customer and its expired orders with items, in bulk."""
    skus = [f"{PREFIX}{i:03d}" for i in range(1, args.skus + 1)]
    prices = {sku: 1000 + 10 * i for i, sku in enumerate(skus, start=1)}
    names = {sku: f"Bench expiry {sku.removeprefix(PREFIX)}" for sku in skus}
    with transaction.atomic():
        user = get_user_model().objects.create(username=USERNAME, password=make_password(None), is_active=True)
        Product.objects.bulk_create([Product(sku=s, name=names[s], price=prices[s], is_active=False) for s in skus])
        received = {"delta": STOCK, "note": "bench expiry", "reason": StockMovement.Reason.RECEIVED}
        StockMovement.objects.bulk_create([StockMovement(product_id=s, **received) for s in skus])
        order_ids = sorted(h.next_order_ids(args.orders))
        reserved: dict[str, int] = defaultdict(int)
        order_rows, item_rows = [], []
        run, currency = random.getrandbits(32), settings.SHOP_CURRENCY
        pending, window = OrderStatus.PENDING_PAYMENT, timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS)
        for n, order_id in enumerate(order_ids):
            total = 0
            for sku in rng.sample(skus, rng.randint(1, 3)):
                quantity = rng.randint(1, 3)
                reserved[sku] += quantity
                total += quantity * prices[sku]
                item_rows.append((order_id, sku, names[sku], quantity, prices[sku]))
            expires_at, key = BASE_EXPIRES_AT + timedelta(milliseconds=n), f"bench-exp-{run:08x}-{n}"
            order_rows.append((order_id, key, "0" * 64, pending, total, currency, expires_at, expires_at - window))
        stock = [Stock(product_id=s, available=STOCK - reserved[s], reserved=reserved[s]) for s in skus]
        Stock.objects.bulk_create(stock)
        columns = "id, idempotency_key, request_hash, status, total_amount, currency, expires_at, created_at"
        h.copy_rows("orders", columns + ", customer_id", (row + (user.id,) for row in order_rows))
        h.copy_rows("order_items", "order_id, sku, name, quantity, unit_price", item_rows)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE orders, order_items, inventory, outbox_events")
    expire_now = BASE_EXPIRES_AT + timedelta(milliseconds=len(order_ids), seconds=1)
    return user.id, order_ids, len(item_rows), sum(reserved.values()), expire_now


@contextlib.contextmanager
def timed_transactions(conn, txns: list[dict]):
    """Each outermost transaction of `conn` into `txns` with the orders its UPDATE cancelled, timed from the start
    of its atomic block (set_autocommit(False)) to the return of its COMMIT (set_autocommit(True) follows it)."""
    current: dict = {}

    def switch(autocommit, *a, **kw):
        if not autocommit:
            current.update(start=time.perf_counter(), orders=0)
        elif current:
            txns.append({**current, "ms": (time.perf_counter() - current["start"]) * 1000})
            current.clear()
        return set_autocommit(autocommit, *a, **kw)

    def count(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if current and sql.startswith('UPDATE "orders" '):
            current["orders"] += max(context["cursor"].rowcount, 0)
        return result

    set_autocommit = conn.set_autocommit
    with mock.patch.object(conn, "set_autocommit", switch), conn.execute_wrapper(count):
        yield


def verify(args, expired: int, customer_id: int, order_ids: list[int]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT status, count(*) FROM orders WHERE customer_id = %s GROUP BY status", [customer_id])
        statuses = dict(cursor.fetchall())
        cursor.execute("SELECT sku, available, reserved, shipped FROM inventory WHERE sku LIKE %s", [PREFIX + "%"])
        stock_rows = cursor.fetchall()
        bad_stock = [r for r in stock_rows if r[2] != 0 or r[1] != STOCK or r[3] != 0]
        cursor.execute(
            """
            SELECT count(*) FILTER (WHERE event_type = 'OrderCancelled'),
                   count(DISTINCT aggregate_id) FILTER (WHERE event_type = 'OrderCancelled'),
                   count(*) FILTER (WHERE event_type <> 'OrderCancelled'),
                   count(*) FILTER (WHERE event_type = 'OrderCancelled' AND payload->>'reason' = 'expired'
                                    AND (payload->>'customer_id')::bigint = %s AND payload->>'order_id' = aggregate_id)
            FROM outbox_events WHERE aggregate_type = 'order'
              AND aggregate_id IN (SELECT id::text FROM orders WHERE customer_id = %s)""",
            [customer_id, customer_id],
        )
        events, distinct_events, other_events, well_formed = cursor.fetchone()
    unbalanced = [r for r in stock_audit(skus=[f"{PREFIX}{i:03d}" for i in range(1, args.skus + 1)]) if r["difference"]]
    n, wrong = len(order_ids), f"{len(bad_stock)} wrong{': ' + str(bad_stock[:3]) if bad_stock else ''}"
    stock = f"{len(stock_rows)} bench SKUs: reserved == 0 and available == {STOCK:,} ({wrong})"
    counted = f"OrderCancelled events: {events:,} for {distinct_events:,} orders, {well_formed:,} well formed, "
    checks = [
        (f"expire_unpaid_orders returned {expired:,} (= bench orders {n:,})", expired == n),
        (f"bench orders by status: {statuses}", statuses == {"CANCELLED": n}),
        (stock, len(stock_rows) == args.skus and not bad_stock),
        (f"stock_audit difference 0 on every bench SKU ({len(unbalanced)} unbalanced)", not unbalanced),
        (counted + f"{other_events} other events", events == distinct_events == well_formed == n and not other_events),
    ]
    return h.print_checks(checks, "=== verification ===", no="FAIL")


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    with h.lock_or_exit("expiry", cleanup, keep=args.keep):
        t0 = time.perf_counter()
        customer_id, order_ids, items, units, expire_now = create_data(args, random.Random(5))
        orders = f"{len(order_ids):,} PENDING_PAYMENT orders with {items:,} items over {args.skus} SKUs"
        made = f"{orders} ({units:,} units reserved), customer {USERNAME} (id {customer_id})"
        print(f"data created in bulk (COPY) and committed in {time.perf_counter() - t0:.1f} s: {made}")
        with timed_transactions(connections["default"], txns := []):
            began = time.perf_counter()
            expired = expire_unpaid_orders(batch_size=args.batch_size, now=expire_now)
            total_s = time.perf_counter() - began
        batch_ms = [t["ms"] for t in txns if t["orders"]]
        rate = expired / total_s
        longest = max(txns, key=lambda t: t["ms"])
        over = f"over {len(order_ids):,} orders, {args.skus} SKUs"
        print(f"\n=== expire_unpaid_orders(batch_size={args.batch_size}) {over} ===")
        pcts = h.each((h.pct(batch_ms, p) for p in (50, 90, 99)), ".1f", " / ")
        batches = f"{len(batch_ms)} batches ({len(txns)} transactions incl. the final empty check)"
        print(f"{total_s:.2f} s, {batches}, p50/p90/p99 {pcts} ms (batches)")
        ok = verify(args, expired, customer_id, order_ids)
        which = f"{longest['ms']:.1f} ms (#{txns.index(longest) + 1}, {longest['orders']} orders)"
        goals = [(f"orders/s {rate:,.0f} >= {GOAL_ORDERS_PER_S:,}", rate >= GOAL_ORDERS_PER_S)]
        goals.append((f"longest transaction {which} < {GOAL_MAX_TXN_MS} ms", longest["ms"] < GOAL_MAX_TXN_MS))
        goals_met = h.print_checks(goals, "=== goals ===", yes="met")
    return 1 if not ok or (args.check and not goals_met) else 0


if __name__ == "__main__":
    sys.exit(main())
