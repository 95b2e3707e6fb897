"""Queue checkout for flash sales: 1. the writer, 2. the drill, 3. regular orders' p99 (bench/README.md).

python -m bench.queue [--parts 1,3 --requests 10000 --rounds 1 --hot-orders 2000 --quiet-seconds 5]
python -m bench.queue --parts 2 --drill "--attempts 5000 --shoppers 500 --stock 100 --refused-requests 2000"
"""

import os
import random
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django_redis import get_redis_connection

from bench import checkout as co
from bench import flash_sale
from bench import harness as h
from inventory.services.flash_sales import seed_flash_sale
from orders.models import Order, OrderItem, PendingOrderCount
from orders.services.builder import OrderDraft, PricedLine
from orders.services.queue_admission import SKUS_KEY, QueuedRequest, claims_key, pending_key
from orders.services.queue_writing import ITEM_FIELDS, ORDER_FIELDS, order_rows
from outbox.models import OutboxEvent
from shop.selectors import cached_products

PREFIX = "BENCH-Q-"  # products BENCH-Q-HOT, BENCH-Q-0001...; shoppers BENCH-Q-H00001... (hot), BENCH-Q-R00001...
HOT, NAME, PRICE, STOCK = f"{PREFIX}HOT", "Bench queue item", 4_999, 10_000_000
SKUS = [f"{PREFIX}{i:04d}" for i in range(1, 1001)]
REGULAR, RATE = 1000, 100.0  # part 3's regular orders: shoppers, each ordering again every REGULAR / RATE s; orders/s
CHURNED = "orders, order_items, outbox_events, outbox_pending, order_pending_counts, inventory"


def background(n: int) -> None:
    """n CANCELLED orders by COPY: with the table empty when analysed, the foreign-key checks to it seq scan."""
    customer, now = h.ensure_users(1, prefix=f"{PREFIX}B")[0], time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime())
    columns = "idempotency_key, request_hash, status, total_amount, currency, expires_at, created_at, customer_id"
    rows = ((f"bg-{i}", "-", "CANCELLED", 0, settings.SHOP_CURRENCY, now, now, customer) for i in range(n))
    h.copy_rows("orders", columns, rows)


def parse_args(argv=None):
    args = h.parse(
        argv,
        __doc__,
        "check",
        parts=("1,2,3", "which parts to run"),
        rounds=(5, "rounds of each part, medians"),
        requests=(50_000, "queued requests per writer drain"),
        orders=(1500, "part 1 orders per round"),
        threads=(16, "place_order threads on the hot SKU"),
        warmup=(10, "unmeasured orders per thread"),
        hot_orders=(5000, "part 3 direct mode's hot orders"),
        quiet_seconds=(10.0, "part 3 window, no sale"),
        background=(100_000, "CANCELLED orders in the table meanwhile"),
        drill=("", 'part 2: options for bench.flash_sale, e.g. "--attempts 5000"'),
        regular_child=("", None),
        valid=lambda a: set(a.parts.split(",")) <= set("123") and a.requests >= 1000 and a.orders >= a.threads,
        error="--parts: some of 1,2,3; --requests >= 1000; --orders >= --threads",
    )
    args.parts = {int(x) for x in args.parts.split(",")}
    return args


def queued(n: int, customers: list[int], tag: str) -> tuple[list[int], list[tuple[bytes, bytes]]]:
    """n admitted checkouts of the hot SKU as the API hands them to Kafka, ids from the orders' sequence."""
    ids = h.next_order_ids(n)
    currency, lines = settings.SHOP_CURRENCY, [PricedLine(HOT, NAME, 1, PRICE)]
    address = h.BENCH_ADDRESS  # each shopper's saved one (harness.ensure_users)
    digest = OrderDraft(0, "", lines, currency, address, 0).request_hash  # as checkout hashes the request
    redis, now = get_redis_connection("default"), time.time()  # pending, as queue_checkout counts them
    redis.zadd(pending_key(HOT), dict.fromkeys(ids, now)), redis.sadd(SKUS_KEY, HOT)
    same = digest, currency, lines, {HOT: 1}, HOT, address  # in every request
    requests = [QueuedRequest(i, customers[k % len(customers)], f"{tag}-{k}", *same) for k, i in enumerate(ids)]
    redis.hset(claims_key(HOT), mapping={request.order_id: request.claim() for request in requests})
    return ids, [(HOT.encode(), request.to_json()) for request in requests]


def drain(env: dict, n: int, customers: list[int], tag: str) -> dict:
    """Produce n queued checkouts, then start write_queued_orders and time it from the first order written to the
    last (one partition, ids ascending), polling every 20 ms (every 5 ms, the poll loaded the machine part 3 times)."""
    ids, messages = queued(n, customers, tag)
    if errors := h.produce(env["KAFKA_CHECKOUT_TOPIC"], messages):
        raise RuntimeError(f"{errors} queued checkouts not delivered to {env['KAFKA_CHECKOUT_TOPIC']}")
    count = """SELECT count(*), count(*) FILTER (WHERE status = 'REJECTED'), count(DISTINCT created_at) FROM orders
        WHERE id BETWEEN %s AND %s"""  # a batch's orders share their created_at
    first = last = None
    with h.queue_writer(env) as writer, h.pg_connect(autocommit=True) as poll:
        exists = lambda i: poll.execute("SELECT EXISTS (SELECT 1 FROM orders WHERE id = %s)", [i]).fetchone()[0]  # noqa: E731
        deadline = time.monotonic() + 120 + n / 500
        while last is None:
            if not writer.alive() or time.monotonic() > deadline:
                why = "exited" if not writer.alive() else "too slow"
                raise RuntimeError(f"write_queued_orders {why}:\n{writer.tail()}")
            if first is None and exists(ids[0]):
                first, cpu0 = time.monotonic(), writer.cpu_seconds()
                before = poll.execute(count, [ids[0], ids[-1]]).fetchone()[0]  # the first batch (or more)
            if first is not None and exists(ids[-1]):
                last, cpu = time.monotonic(), writer.cpu_seconds() - cpu0
            time.sleep(0.02)
        written, rejected, batches = poll.execute(count, [ids[0], ids[-1]]).fetchone()
    timed, seconds = n - before, last - first
    result = dict(rate=timed / seconds, seconds=seconds, window=(first, last), cpu_ms=cpu * 1000 / timed)
    return result | dict(written=written, rejected=rejected, batches=batches)


CEILING_BATCH = 500  # the writer's QUEUE_BATCH_SIZE default
EVENT_FIELDS = (
    "event_id aggregate_type aggregate_id event_type payload created_at attempts last_error request_id".split()
)


def columns(model, fields: list[str]) -> str:
    return ", ".join(model._meta.get_field(name).column for name in fields)


def ceiling(n: int, customers: list[int], tag: str) -> dict:
    """The database's own limit for the writer's work, as pgbench measured it for issue 48: the rows write_batch
    writes for n queued checkouts of the hot SKU, committed raw in batches of 500 on one psycopg connection,
    each one transaction: the stock's conditional UPDATE for the batch, then the orders, their items and their
    OrderCreated events by set-based INSERT (each row's id, shopper and key from arrays, the rest the writer's
    own values for this cart: queue_writing.order_rows of the first request), the shoppers' pending-order
    counts, COMMIT (synchronous_commit on)."""
    ids, now = h.next_order_ids(n), timezone.now()
    currency, lines = settings.SHOP_CURRENCY, [PricedLine(HOT, NAME, 1, PRICE)]
    digest = OrderDraft(0, "", lines, currency, h.BENCH_ADDRESS, 0).request_hash
    same = digest, currency, lines, {HOT: 1}, HOT, h.BENCH_ADDRESS
    requests = [QueuedRequest(i, customers[k % len(customers)], f"{tag}-{k}", *same) for k, i in enumerate(ids)]
    [order], [item], [event] = order_rows(requests[:1], {}, now)
    constant = ORDER_FIELDS[2:]  # after customer_id and idempotency_key, which vary
    assert ORDER_FIELDS[:2] == ["customer_id", "idempotency_key"]
    marks = ", ".join(["%s"] * len(constant))
    insert_orders = f"""INSERT INTO {Order._meta.db_table} ({columns(Order, ["id", *ORDER_FIELDS])})
        SELECT r.id, r.customer, r.key, {marks}
        FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS r(id, customer, key)"""
    item_marks = ", ".join(["%s"] * len(ITEM_FIELDS))
    insert_items = f"""INSERT INTO {OrderItem._meta.db_table} ({columns(OrderItem, ["order_id", *ITEM_FIELDS])})
        SELECT r.id, {item_marks} FROM unnest(%s::bigint[]) AS r(id)"""
    insert_events = f"""INSERT INTO {OutboxEvent._meta.db_table} ({columns(OutboxEvent, EVENT_FIELDS)})
        SELECT gen_random_uuid(), 'order', r.id::text, %s,
            jsonb_set(jsonb_set(%s::jsonb, '{{order_id}}', to_jsonb(r.id)), '{{customer_id}}', to_jsonb(r.customer)),
            %s, 0, '', '' FROM unnest(%s::bigint[], %s::bigint[]) AS r(id, customer)"""
    pending = f"UPDATE {PendingOrderCount._meta.db_table} SET pending = pending + %s WHERE customer_id = ANY(%s)"
    payload = DjangoJSONEncoder().encode(event.data)
    with h.pg_connect() as conn:
        started = time.perf_counter()
        for start in range(0, n, CEILING_BATCH):
            chunk = requests[start : start + CEILING_BATCH]
            batch_ids, shoppers = [r.order_id for r in chunk], [r.customer_id for r in chunk]
            by_count: dict[int, list[int]] = {}
            for customer, count in Counter(shoppers).items():
                by_count.setdefault(count, []).append(customer)
            with conn.cursor() as cur:
                cur.execute(co.RESERVE, [len(chunk), len(chunk), len(chunk), HOT])
                if cur.rowcount != 1:
                    raise RuntimeError(f"the ceiling ran out of {HOT}'s stock")
                cur.execute(insert_orders, [*order[3:], batch_ids, shoppers, [r.idempotency_key for r in chunk]])
                cur.execute(insert_items, [*item[1:], batch_ids])
                cur.execute(insert_events, [event.event_type, payload, now, batch_ids, shoppers])
                for count, of in sorted(by_count.items()):
                    cur.execute(pending, [count, of])
            conn.commit()
        seconds = time.perf_counter() - started
    return {"rate": n / seconds, "seconds": seconds}


def place(customers: list[int], n: int, args, tag: str) -> h.Run:
    warm = args.warmup * args.threads
    jobs = [co.Job(customers[i], f"{tag}-{i}", HOT) for i in range(n + warm)]
    h.fill_carts([(job.customer_id, {HOT: 1}) for job in jobs])
    return co.run_threads("django", jobs[warm:], jobs[:warm], args.threads)


def part1(args, env: dict, hot: list[int], run_id: str) -> list:
    placing = f"place_order ({args.threads} threads, {args.orders:,} orders, direct mode)"
    draining = f"write_queued_orders draining {args.requests:,} queued checkouts"
    print(f"\npart 1: {args.rounds} round(s) of {placing} and of {draining}, on {HOT}")
    runs, drains, ceilings = [], [], []
    for r in range(args.rounds):
        h.vacuum(CHURNED)
        runs.append(p := place(hot, args.orders, args, f"{PREFIX}{run_id}-p{r}"))
        h.vacuum(CHURNED)
        drains.append(d := drain(env, args.requests, hot, f"{PREFIX}{run_id}-q{r}"))
        h.delete_orders(hot)
        h.vacuum(CHURNED)
        ceilings.append(c := ceiling(args.requests, hot, f"{PREFIX}{run_id}-c{r}"))
        h.delete_orders(hot)
        placing = f"{p.rps:,.0f} orders/s ({h.latency(p.records)}, {p.cpu_ms:.2f} CPU ms/order"
        writer = f"{d['rate']:,.0f} orders/s ({d['seconds']:.2f} s, {d['batches']} batches, {d['cpu_ms']:.3f} writer"
        written = f"CPU ms/order, {d['written']:,} written, {d['rejected']} rejected)"
        raw = f"raw ceiling {c['rate']:,.0f} orders/s ({c['seconds']:.2f} s; writer ÷ it {d['rate'] / c['rate']:.2f})"
        print(f"  round {r + 1}: place_order {placing}, {p.errors} errors); writer {writer} {written}; {raw}")
    p, d = h.median(runs, lambda x: x.rps), h.median(drains, lambda x: x["rate"])
    ratio = d["rate"] / p.rps if p.rps else 0.0
    ok = all(x["written"] == args.requests and not x["rejected"] for x in drains)
    by_round = [x["rate"] / c["rate"] for x, c in zip(drains, ceilings, strict=True)]
    of_ceiling = statistics.median(by_round)
    return [
        (
            "1. writer / raw ceiling, same round (median)",
            ">= 0.25",
            f"{of_ceiling:.2f} ({h.each(by_round)}; ceilings {h.each([c['rate'] for c in ceilings], ',.0f')}/s)",
            of_ceiling >= 0.25,
        ),
        ("1. writer orders/s (median)", ">= 6,000", f"{d['rate']:,.0f}", d["rate"] >= 6000),
        ("1. writer / place_order (medians)", ">= 6", f"{d['rate']:,.0f} / {p.rps:,.0f} = {ratio:.1f}", ratio >= 6),
        ("1. every request written, none rejected", "all", "yes" if ok else "NO", ok),
    ]


def part2(args) -> list:
    """args.rounds rounds of the drill, direct then queue mode; the medians are compared (bench/README.md)."""
    rounds: list[dict[str, dict]] = []
    for r in range(args.rounds):
        results: dict[str, dict] = {}
        for mode in ("direct", "queue"):
            command = f"python -m bench.flash_sale {args.drill} --mode {mode}".replace("  ", " ")
            print(f"\npart 2, round {r + 1} of {args.rounds}: {command}")
            drill = ["--rounds", "1", *shlex.split(args.drill), "--mode", mode]  # one refused phase a drill
            flash_sale.main(drill, results.setdefault(mode, {}))
        if any("p99" not in results[mode] for mode in results):
            return [("2. the drill", "runs", f"failed in round {r + 1}", False)]
        rounds.append(results)
    for r, results in enumerate(rounds):
        d, q = results["direct"], results["queue"]
        direct = f"of the 201s (direct) {d['p99']:.0f} ms (p50 {d['p50']:.0f})"
        print(f"  round {r + 1}: p99 of the 202s (queue) {q['p99']:.0f} ms (p50 {q['p50']:.0f}), {direct}")
    queues = [x["queue"] for x in rounds]
    median = {(m, k): statistics.median(x[m][k] for x in rounds) for m in ("queue", "direct") for k in ("p50", "p99")}
    q_p99, d_p99, stock = median["queue", "p99"], median["direct", "p99"], queues[0]["stock"]
    missed = sorted({m for results in rounds for mode in ("queue", "direct") for m in results[mode]["missed"]})
    every_round = {"orders written": ("orders", stock, ","), "5xx": ("r5xx", 0, "")}
    every_round["SQL statements in refused requests"] = ("sql", 0, "")
    rows = []
    for name, (key, want, spec) in every_round.items():
        shown, good = h.each((q[key] for q in queues), spec, ", "), all(q[key] == want for q in queues)
        rows.append((f"2. queue mode: {name}, every round", f"= {want:,}" if want else "0", shown, good))
    p50s, lag = f"(p50 {median['queue', 'p50']:.0f} vs {median['direct', 'p50']:.0f})", max(q["lag"] for q in queues)
    p99s = f"{q_p99:.0f} ms vs {d_p99:.0f} ms {p50s}"
    clean = all(q["db"] == f"0/{stock}" and q["counter"] == 0 for q in queues)
    gates = ", ".join(f"{q['db']}, {q['counter']}" for q in queues)
    return rows + [
        (f"2. p99 of the 202s (queue) <= of the 201s (direct), medians of {len(rounds)}", "<=", p99s, q_p99 <= d_p99),
        ("2. last order written after the last 202, worst round", "<= 2 s", f"{lag:.2f} s", lag <= 2),
        ("2. DB available/reserved, gate after the sale", f"0/{stock}, 0", gates, clean),
        ("2. the drill's other checks, both modes", "ok", ", ".join(missed) or "ok", not missed),
    ]


def regular_child(args) -> int:
    """Part 3's regular orders: 8 threads, latency from the scheduled start; "scheduled latency error" lines. Each
    shopper's cart is filled for its next order (REGULAR / RATE s later) after each order, outside the timing."""
    h.setup()
    customers, rng = h.user_ids(f"{PREFIX}R"), random.Random(3)
    cached_products(skus=SKUS)  # the hot cache warm, as a server's
    h.fill_carts([(customer, {rng.choice(SKUS): 1}) for customer in customers])
    out = open(args.regular_child, "w", buffering=1)  # noqa: SIM115 - until killed

    def place(k: int, due: float) -> None:
        customer, error = customers[k % len(customers)], "-"
        try:
            co.django_order(co.Job(customer, f"{PREFIX}r{os.getpid()}-{k}", ""))
        except Exception as exc:  # noqa: BLE001 - counted
            error = type(exc).__name__
        out.write(f"{due} {time.monotonic() - due} {error}\n")
        h.fill_carts([(customer, {random.choice(SKUS): 1})])

    h.open_loop(place, RATE, 8)
    print("ready", flush=True)
    try:
        while True:
            time.sleep(1)
    except SystemExit:  # SIGTERM (harness.setup)
        return 0


def part3(args, env: dict, hot: list[int], run_id: str) -> list:
    regular = f"regular place_order calls on {len(SKUS):,} other SKUs at {RATE:g}/s (a child process, 8 threads)"
    hot_load = f"during place_order on {HOT} ({args.threads} threads, {args.hot_orders:,} orders)"
    queued = f"during write_queued_orders draining {args.requests:,} requests"
    print(f"\npart 3: {regular} with no sale for {args.quiet_seconds:g} s, {hot_load} and {queued}")
    out = Path(tempfile.mkdtemp(prefix="bench-queue-")) / "regular.txt"
    windows = {}  # (round, name) -> (start, end) in time.monotonic()
    command = [str(h.VENV_BIN / "python"), "-m", "bench.queue", "--regular-child", str(out)]
    with h.Child("regular", command, pipe_stdout=True) as child:
        if child.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the regular orders' process failed:\n{child.tail()}")
        h.vacuum(CHURNED)
        time.sleep(2)  # its connections warm
        for r in range(args.rounds):
            began = time.monotonic()
            time.sleep(args.quiet_seconds)
            windows[r, "no sale"] = began, time.monotonic()
            run = place(hot, args.hot_orders, args, f"{PREFIX}{run_id}-d{r}")
            windows[r, "direct mode"] = windows[r, "no sale"][1], time.monotonic()
            h.delete_orders(hot)
            h.vacuum(CHURNED)
            d = drain(env, args.requests, hot, f"{PREFIX}{run_id}-w{r}")
            windows[r, "queue mode"] = d["window"]
            h.delete_orders(hot)
            h.vacuum(CHURNED)
            direct = f"direct {run.rps:,.0f} orders/s over {run.seconds:.1f} s ({run.errors} errors)"
            writer = f"writer {d['rate']:,.0f} orders/s over {d['seconds']:.1f} s ({d['rejected']} rejected)"
            print(f"  round {r + 1}: hot load: {direct}; {writer}")
    lines = [x.split() for x in out.read_text().splitlines() if x.count(" ") == 2]  # the last line may be cut
    records = [(float(a), float(lat), e) for a, lat, e in lines]
    out.unlink()
    p99: dict[str, list[float]] = {}
    for (r, name), (a, b) in windows.items():
        inside = [x for x in records if a <= x[0] <= b]
        ms = [x[1] * 1000 for x in inside]
        p99.setdefault(name, []).append(h.pct(ms, 99))
        errors = dict(Counter(x[2] for x in inside if x[2] != "-")) or 0
        pcts = [h.pct(ms, q) for q in (50, 90, 99, 100)]
        counted = f"{len(inside):,} in {b - a:.1f} s ({len(inside) / (b - a):.0f}/s), errors {errors}"
        print(f"  round {r + 1}, regular orders, {name}: {counted}, p50/p90/p99/max {h.each(pcts, '.1f', '/')} ms")
    quiet, direct, queue = (statistics.median(p99[name]) for name in ("no sale", "direct mode", "queue mode"))
    n, twice = f"medians of {args.rounds}", f"{queue:.1f} ms vs 2 x {quiet:.1f} ms"
    return [
        # Information, not a goal (bench/README.md, queue part 3): on two shared cores it cannot be met.
        (f"3. regular p99, queue mode vs 2 x no sale, {n}", "(info)", twice, None),
        (f"3. regular p99, queue mode < direct mode, {n}", "<", f"{queue:.1f} ms vs {direct:.1f} ms", queue < direct),
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.regular_child:
        return regular_child(args)
    h.setup()
    run_id, began = uuid.uuid4().hex[:8], time.perf_counter()
    batches = f"QUEUE_BATCH_SIZE {settings.QUEUE_BATCH_SIZE}, QUEUE_BATCH_WAIT_MS {settings.QUEUE_BATCH_WAIT_MS}"
    broker = f"{os.cpu_count()} CPUs, broker {settings.KAFKA_BOOTSTRAP_SERVERS}"
    rows, env, topic = [], {}, f"bench.queue.{run_id}"
    with h.lock_or_exit("queue", lambda: h.delete_orders(h.user_ids(PREFIX))):
        print(f"queue bench {run_id}: parts {sorted(args.parts)}, {broker}, {batches}")
        try:
            if args.parts & {1, 3}:
                seed_flash_sale(sku=HOT, stock=STOCK, price=PRICE, name=NAME, mode="direct")
                h.ensure_products(SKUS, 1_000_000)
                shoppers = max(args.orders, args.hot_orders) + args.warmup * args.threads
                hot = h.ensure_users(shoppers, prefix=f"{PREFIX}H")
                h.ensure_users(REGULAR, prefix=f"{PREFIX}R")
                env = h.queue_topic(topic)
                background(args.background)
            if 3 in args.parts:  # first: before part 1's 300,000 orders set checkpoints going
                rows += part3(args, env, hot, run_id)
            if 1 in args.parts:
                rows += part1(args, env, hot, run_id)
            if 2 in args.parts:
                rows += part2(args)
        finally:
            h.end_sale(HOT)
            if env:
                h.delete_topics([topic])
    print(f"\nSUMMARY ({time.perf_counter() - began:.0f} s)")
    rows.sort(key=lambda row: row[0][0])  # by part
    h.print_table(["figure", "goal", "measured", ""], [(*row[:3], h.verdict(row[3])) for row in rows])
    return 1 if args.check and not all(row[3] for row in rows if row[3] is not None) else 0


if __name__ == "__main__":
    sys.exit(main())
