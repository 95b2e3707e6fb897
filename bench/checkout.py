"""place_order against the same work through plain psycopg, and a checkout's SQL statements (bench/README.md).

python -m bench.checkout [--orders 3000 --rounds 1 --skus 1000]"""

import contextlib
import functools
import hashlib
import itertools
import json
import random
import sys
import threading
import time
import uuid
from collections import namedtuple
from datetime import timedelta

import psycopg
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench import harness as h
from cart.storage import VOUCHER_FIELD
from core.hotcache import StaleCache, hot_cache
from orders.services import place_order
from shop.models import Product, Promotion
from shop.promotions import REDEEM_SQL, create_voucher
from shop.selectors import cached_charges, cached_products, cached_promotions, cached_voucher
from shop.totals import tax_of

PREFIX = "BENCH-CO-"
HOT_SKU = f"{PREFIX}HOT"
VOUCHER = f"{PREFIX}V"  # scenario (v): 10% off each unit, limits far away (its row is locked and counted all the same)
SHIPPING, SHIPPING_PRICE = h.SHIPPING, h.SHIPPING_PRICE  # every cart ships, flat, taxed as its goods
STOCK = 1_000_000  # "plenty": topped up to at least this (plus what a run needs) before a run
GOALS = {"a": 0.6, "b": 0.6, "v": 0.6}
STATEMENT_GOAL_EXTRA = 6  # k + 6 statements for a k-line cart, BEGIN/COMMIT included

# The ceiling: what place_order does for a one-line cart once warm, as plain psycopg statements in its
# order (autocommit off: the first statement opens the transaction). Prices come from process memory, as
# the service's hot cache serves them, and so does the shopper's saved address (the service reads it from
# Redis with the cart). Take a pending-order slot (the counter every account has); insert the order unless
# the key has one, and its items, in one statement; add its units to the shopper's unpaid holds; the
# OrderCreated event; with a voucher, count its use (shop.promotions.REDEEM_SQL); reserve the stock, last; COMMIT.
SLOT = "UPDATE order_pending_counts SET pending = pending + %s WHERE customer_id = %s AND pending < %s"
ORDER = """WITH o AS (INSERT INTO orders (customer_id, idempotency_key, request_hash, status, total_amount, currency,
    expires_at, created_at, rejection_reason, shipping_address, hold_address, holds_units, discounts,
    prices_include_tax, tax_country, tax_amount, shipping_amount, shipping)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, '', %s::jsonb, '', true, %s::jsonb, true, %s, %s, %s, %s::jsonb)
    ON CONFLICT (customer_id, idempotency_key) DO NOTHING RETURNING id),
  i AS (INSERT INTO order_items (order_id, sku, name, quantity, unit_price, discount, tax_rate, tax, gross)
    SELECT o.id, %s, %s, %s, %s, %s, %s, %s, %s FROM o RETURNING 1) SELECT id FROM o"""
HOLDS = """INSERT INTO order_unpaid_holds AS h (holder, sku, units, cap) VALUES (%s, %s, %s, %s)
    ON CONFLICT (holder, sku) DO UPDATE SET units = h.units + EXCLUDED.units, cap = EXCLUDED.cap
    WHERE h.units + EXCLUDED.units <= EXCLUDED.cap RETURNING holder"""
EVENT = """INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, event_type, payload, created_at,
    attempts, last_error, request_id) VALUES (%s, %s, %s, %s, %s::jsonb, %s, 0, '', %s) RETURNING id"""
RESERVE = "UPDATE inventory SET available = available - %s, reserved = reserved + %s WHERE available >= %s AND sku = %s"
PRICES: dict[str, tuple[str, int]] = {}  # sku -> (name, price): the ceiling's hot cache, filled before the runs
RATES: dict[str, int] = {}  # tax class -> basis points in the bench address's country, as the hot cache holds them
CEILING_STATEMENTS = 5  # besides COMMIT; one more with a voucher


def parse_args(argv=None):
    return h.parse(
        argv,
        __doc__,
        "check",
        threads=(16, "threads, each with its own connection"),
        orders=(1500, "measured orders per run"),
        rounds=(3, "runs per scenario and side, interleaved; the median run is reported"),
        warmup=(10, "unmeasured orders per thread before each run"),
        skus=(1000, "SKUs of scenario (b)"),
        scenarios=("abv", "which scenarios to run: any of a, b, v"),
        valid=lambda a: a.orders >= a.threads and a.skus >= 15 and set(a.scenarios) <= set("abv"),
        error="need --orders >= --threads, --skus >= 15, --scenarios of a, b, v",
    )


Job = namedtuple("Job", "customer_id key sku voucher", defaults=(None,))  # voucher: (id, name), scenario (v)


def psycopg_order(conn, cur, job: Job) -> bool:
    """One checkout through the ceiling's statements, its values computed as place_order computes them."""
    name, price = PRICES[job.sku]
    currency, now = settings.SHOP_CURRENCY, timezone.now()
    expires_at = now + timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS)
    off = (price * 10 + 50) // 100 if job.voucher else 0  # the voucher's 10%, half up
    rate, country = RATES.get("standard", 0), h.BENCH_ADDRESS["country"]
    tax, ship_tax = tax_of(price - off, rate, included=True), tax_of(SHIPPING_PRICE, rate, included=True)
    line = (job.sku, 1, price, *([off] * bool(off or tax)), *([rate, tax] * bool(tax)))
    total, tax_amount = price - off + SHIPPING_PRICE, tax + ship_tax
    ship_net, taxes = SHIPPING_PRICE - ship_tax, [{"rate": rate, "base": SHIPPING_PRICE - ship_tax, "amount": ship_tax}]
    shipping = dict(code=SHIPPING, name="Bench shipping", price=SHIPPING_PRICE, discount=0, net=ship_net, tax=ship_tax)
    shipping |= dict(gross=SHIPPING_PRICE, taxes=taxes, country=country)
    voucher_id, voucher_name = job.voucher or (None, None)
    discounts = [{"promotion_id": voucher_id, "name": voucher_name, "code": VOUCHER, "amount": off}] if off else []
    try:
        cur.execute(SLOT, [1, job.customer_id, settings.MAX_PENDING_ORDERS_PER_CUSTOMER])
        if cur.rowcount != 1:
            raise RuntimeError(f"no pending-order slot for {job.customer_id}")
        address = h.BENCH_ADDRESS  # the shopper's saved address, from process memory as the prices
        canonical = [currency, [line], address, [SHIPPING, SHIPPING_PRICE, ship_tax]]
        request_hash = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
        order = [job.customer_id, job.key, request_hash, "PENDING_PAYMENT", total, currency, expires_at, now]
        order += [json.dumps(address), json.dumps(discounts), country, tax_amount, SHIPPING_PRICE, json.dumps(shipping)]
        cur.execute(ORDER, [*order, job.sku, name, 1, price, off, rate, tax, price - off])
        if (row := cur.fetchone()) is None:
            raise RuntimeError(f"order {job.key} exists")
        cur.execute(HOLDS, [f"customer:{job.customer_id}", job.sku, 1, settings.MAX_UNPAID_UNITS_PER_SKU])
        if cur.fetchone() is None:
            raise RuntimeError(f"hold limit reached for {job.customer_id}")
        item = {"sku": job.sku, "name": name, "quantity": 1, "unit_price": price, "discount": off, "tax_rate": rate}
        items = [item | {"net": price - off - tax, "tax": tax, "gross": price - off}]
        tax_lines = [{"rate": rate, "base": price - off - tax + ship_net, "amount": tax_amount}]
        payload = dict(order_id=row[0], customer_id=job.customer_id, subtotal=price, discounts=discounts, total=total)
        payload |= dict(currency=currency, shipping_address=address, items=items, expires_at=expires_at.isoformat())
        payload |= dict(shipping=shipping, prices_include_tax=True, tax_country=country, tax=tax_amount)
        payload |= dict(tax_lines=tax_lines)
        event = json.dumps(payload, cls=DjangoJSONEncoder)
        cur.execute(EVENT, [uuid.uuid4(), "order", str(row[0]), "OrderCreated", event, timezone.now(), ""])
        cur.fetchone()
        if job.voucher:
            cur.execute(REDEEM_SQL, [job.voucher[0], job.customer_id, job.customer_id, row[0]])
            if cur.fetchone()[1] != 1:
                raise RuntimeError(f"voucher used up for {job.customer_id}")
        cur.execute(RESERVE, [1, 1, 1, job.sku])
        if cur.rowcount != 1:
            raise RuntimeError(f"out of stock: {job.sku}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return False  # not a replay


def django_cursor(conn):
    """The cursor Django's settings give it: server-side binding with OPTIONS server_side_binding."""
    server_side = connection.settings_dict["OPTIONS"].get("server_side_binding")
    return psycopg.Cursor(conn) if server_side else psycopg.ClientCursor(conn)


def django_order(job: Job, address: dict | None = None):
    """place_order as the API calls it: once more after StaleCache, the caches dropped (HotCacheApiView)."""
    try:
        return place_order(customer_id=job.customer_id, idempotency_key=job.key, shipping_address=address)
    except StaleCache:
        hot_cache.clear()
        return place_order(customer_id=job.customer_id, idempotency_key=job.key, shipping_address=address)


def run_threads(side: str, jobs: list[Job], warm: list[Job], threads: int) -> h.Run:
    """`threads` threads, each warmed up with its share of `warm`, then timed from a common start to the last order;
    the run's records: each order's ms; its CPU: this process's (all threads)."""
    gate, ms, errors, ends = threading.Barrier(threads + 1), [], [], [0.0] * threads

    def body(slot: int) -> None:
        if side == "django":
            conn, one = connection, lambda job: django_order(job).replayed
        else:
            conn = h.pg_connect(autocommit=False)
            one = functools.partial(psycopg_order, conn, django_cursor(conn))
        try:
            try:
                for job in warm[slot::threads]:
                    one(job)
                gate.wait()
            except BaseException as exc:  # reported below, never swallowed
                errors.append(f"thread {slot}: {exc!r}")
                return gate.abort()
            for job in jobs[slot::threads]:
                began = time.perf_counter()
                try:
                    if one(job):
                        errors.append(f"replayed order for {job.key}")
                except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                    errors.append(repr(exc))
                    continue
                ms.append((time.perf_counter() - began) * 1000)
            ends[slot] = time.perf_counter()
        finally:
            conn.close()

    pool = [threading.Thread(target=body, args=(slot,), daemon=True) for slot in range(threads)]
    for t in pool:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread failed before the start
        gate.wait()
    began, cpu_began = time.perf_counter(), time.process_time()
    for t in pool:
        t.join()
    if gate.broken:
        raise RuntimeError(f"{side}: a thread failed before the start: {errors[:3]}")
    seconds, cpu = max(ends) - began, time.process_time() - cpu_began
    p50, p99 = h.pct(ms, 50), h.pct(ms, 99)
    return h.Run("threads", threads, len(jobs), len(ms), seconds, len(errors), 0, p50, p99, cpu, ms, errors)


SHIPS = h.SHIPS


def cart(job: Job) -> dict:
    return {job.sku: 1, VOUCHER_FIELD: VOUCHER, **SHIPS} if job.voucher else {job.sku: 1, **SHIPS}


def same_work(customer_id: int, sku: str, key: str, voucher: tuple | None) -> list[str]:
    """One order each way, same shopper and cart: what each wrote (ids and clocks aside), compared."""
    h.fill_carts([(customer_id, cart(Job(customer_id, key, sku, voucher)))])
    django_order(Job(customer_id, f"{key}-d", sku))
    with h.pg_connect(autocommit=False) as conn:
        psycopg_order(conn, django_cursor(conn), Job(customer_id, f"{key}-p", sku, voucher))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT o.request_hash, o.status, o.total_amount AS total, o.currency,
                   o.expires_at - o.created_at AS "payment window", o.shipping_address AS "shipping address",
                   o.hold_address AS "hold address", o.holds_units AS "holds units",
                   o.rejection_reason AS "rejection reason", o.discounts,
                   (SELECT json_agg(json_build_array(sku, name, quantity, unit_price, discount)) FROM order_items
                    WHERE order_id = o.id) AS items,
                   (SELECT json_agg(json_build_array(event_type, payload - 'order_id' - 'expires_at', attempts,
                                                     payload->>'order_id' = o.id::text, request_id))
                    FROM outbox_events WHERE aggregate_type = 'order' AND aggregate_id = o.id::text) AS "outbox event"
            FROM orders o WHERE o.customer_id = %s AND o.idempotency_key IN (%s, %s) ORDER BY o.idempotency_key""",
            [customer_id, f"{key}-d", f"{key}-p"],
        )
        names, rows = [c.name for c in cursor.description], cursor.fetchall()
    return [f"{n}: Django {a!r}, psycopg {b!r}" for n, a, b in zip(names, *rows, strict=True) if a != b]


def count_statements(customer_id: int, skus: list[str], k: int, key: str, address=None, voucher=None) -> tuple:
    """One checkout of a k-line cart outside any transaction: (CaptureQueriesContext, execute_wrapper) counts."""
    cached_products(skus=skus[:k])  # a checkout in steady state: the prices, promotions and voucher in the hot cache
    cached_promotions(), cached_voucher(VOUCHER), cached_charges()
    h.fill_carts(
        [(customer_id, {**{sku: 1 for sku in skus[:k]}, **({VOUCHER_FIELD: voucher} if voucher else {}), **SHIPS})]
    )
    with CaptureQueriesContext(connection) as ctx, h.counting_sql() as counted:
        django_order(Job(customer_id, key, ""), address)
    return len(ctx.captured_queries), counted[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    with h.lock_or_exit("checkout", lambda: h.delete_orders(h.user_ids(PREFIX))):
        warm_total = args.warmup * args.threads
        per_run, run_id, rng = args.orders + warm_total, uuid.uuid4().hex[:8], random.Random(4)
        skus = [f"{PREFIX}{i:04d}" for i in range(1, args.skus + 1)]
        h.ensure_products([HOT_SKU, *skus], STOCK + 2 * args.rounds * per_run + 100)  # a run reserves per_run at most
        h.ensure_shipping_and_tax([HOT_SKU, *skus])
        shoppers = h.ensure_users(per_run + 1, prefix=PREFIX)
        limits = {"percent": 10, "usage_limit": 10**9, "per_customer_limit": 10**6}
        found = Promotion.objects.filter(code=VOUCHER).first() or create_voucher(code=VOUCHER, **limits)
        voucher = (found.id, found.name)
        products = Product.objects.filter(sku__in=[HOT_SKU, *skus], is_active=True)
        PRICES.update({sku: (name, price) for sku, name, price in products.values_list("sku", "name", "price")})
        cached_products(skus=list(PRICES))  # place_order's hot cache holds the prices, as the ceiling's PRICES
        RATES.update(cached_charges().rates_in(h.BENCH_ADDRESS["country"], on=timezone.now().date()))
        results: dict[str, dict[str, list[h.Run]]] = {}
        differences = same_work(shoppers[-1], skus[0], f"{PREFIX}{run_id}-same", None)
        differences += same_work(shoppers[-1], skus[1], f"{PREFIX}{run_id}-same-v", voucher)
        body = {**h.BENCH_ADDRESS, "line2": "Bench address in the body"}
        cases = {1: (), 3: (), 5: (), "1, address in the body": (body,), "1, with a voucher": (None, VOUCHER)}
        counts = {}  # label -> counts, k (the cart's lines) from the label
        for n, (label, extra) in enumerate(cases.items()):
            key = f"{PREFIX}{run_id}-c{n}"
            counts[label] = count_statements(shoppers[-1], skus[10:], int(str(label)[0]), key, *extra)
        # Django then psycopg, same threads, same orders; rounds interleaved (a machine shared with other work
        # drifts: each side gets the same share of it).
        scenarios = [s for s in "abv" if s in args.scenarios]
        picks = {s: [HOT_SKU] * per_run if s == "a" else [rng.choice(skus) for _ in range(per_run)] for s in scenarios}
        for n, scenario, side in itertools.product(range(args.rounds), scenarios, ("django", "psycopg")):
            tag, code = f"{PREFIX}{run_id}-{n}{scenario}-{side[0]}", voucher if scenario == "v" else None
            jobs = [Job(shoppers[i], f"{tag}-{i}", picks[scenario][i], code) for i in range(per_run)]
            if side == "django":
                h.fill_carts([(job.customer_id, cart(job)) for job in jobs])
            result = run_threads(side, jobs[warm_total:], jobs[:warm_total], args.threads)
            results.setdefault(scenario, {}).setdefault(side, []).append(result)

    titles, ok = {"a": "(a) 1 hot SKU", "b": f"(b) {args.skus} SKUs, random", "v": "(v) (b) with a voucher"}, True
    rounds = f"median of {args.rounds} interleaved runs" if args.rounds > 1 else "one run"
    work = f"{args.threads} threads, {args.orders} orders a run, {rounds}; CPU ms/order: this process's"
    print(f"\nplace_order vs the same work through plain psycopg: {work}")
    rows, ratios, errors = [], [], []
    for scenario, sides in results.items():
        median = {side: h.median(runs, lambda r: r.rps) for side, runs in sides.items()}
        for side, r in median.items():
            each_run, failed = h.each((x.rps for x in sides[side]), ".0f"), sum(x.errors for x in sides[side])
            figures = [f"{r.rps:.0f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.cpu_ms:.2f}", failed, each_run]
            rows.append([titles[scenario] * (side == "django"), side, *figures])
            errors += [f"  {titles[scenario]}, {side} error: {e}" for run in sides[side] for e in run.failures][:3]
        ratio = median["django"].rps / median["psycopg"].rps if median["psycopg"].rps else 0.0
        each = h.each(d.rps / p.rps for d, p in zip(sides["django"], sides["psycopg"], strict=True))
        ok &= (met := ratio >= GOALS[scenario])
        goal = f"(goal >= {GOALS[scenario]})  {h.verdict(met)}   [each round: {each}]"
        ratios.append(f"  {titles[scenario]}: ratio django/psycopg = {ratio:.2f}  {goal}")
    h.print_table(["scenario", "side", "orders/s", "p50 ms", "p99 ms", "CPU ms/order", "errors", "each run"], rows)
    print("\n".join(ratios + errors))
    if differences or (counts[1][1], counts["1, with a voucher"][1]) != (CEILING_STATEMENTS, CEILING_STATEMENTS + 1):
        ok = False
        sent = f"place_order sent {counts[1][1]} statements for a one-line cart, the ceiling {CEILING_STATEMENTS}"
        why = f"{sent}; rows that differ: {differences or 'none'}"
        print(f"the ceiling no longer does place_order's work: update bench/checkout.py. {why}")
    else:
        print("the ceiling wrote the same rows as place_order (an order each way, compared) with as many statements")
    print("\nSQL statements per checkout of a k-line cart (caches warm; execute_wrapper + BEGIN + COMMIT):")
    for label, (captured, wrapped) in counts.items():
        goal = int(str(label).split(",")[0]) + STATEMENT_GOAL_EXTRA + ("voucher" in str(label))
        ok &= (met := wrapped + 2 <= goal)
        counted = f"execute_wrapper {wrapped} + BEGIN + COMMIT = {wrapped + 2}; CaptureQueriesContext {captured}"
        print(f"  k={label}: {counted}  (goal <= {goal})  {h.verdict(met)}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
