"""The flash-sale drill (issue 7; bench/README.md): a sale over HTTP, then a phase of refusals only.

    python -m bench.flash_sale                  # 50,000 attempts, 5,000 shoppers, 1,000 units
    python -m bench.flash_sale --mode queue     # the sale in queue mode, write_queued_orders running (issue 17)
    python -m bench.flash_sale --attempts 5000 --shoppers 500 --stock 100 --refused-requests 2000 --no-pg-stat

Exit status 1 when a check is missed (the list at the end)."""

import importlib
import math
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter

from django.conf import settings
from django.db import connection
from tqdm import tqdm

from bench import harness as h

SKU = "FLASH-DRILL"
PREFIX = "flash-"  # drill shoppers: flash-00001...
PG_FLUSH_SECONDS = 11.0  # PostgreSQL 15 backends flush idle statistics every 10 s at the latest
RATIO_GOAL = 0.6  # issue 26 (0.5 before)
WRITE_LAG_GOAL = 2.0  # queue mode: seconds from the last admission (202) to the last order written
METRICS_TOKEN = uuid.uuid4().hex  # /metrics of the drill's gunicorn (DEBUG off) wants one
METRICS = ("shop_orders_created_total", "shop_checkout_refusals_total", "shop_idempotent_replays_total",
           "shop_queue_admitted_total", "shop_queue_orders_rejected_total")


def parse_args(argv=None):
    p = h.parser(__doc__, "concurrency", "workers", "threads", "client_threads", concurrency=64,
                 attempts=(50_000, "checkout attempts in the sale"), shoppers=(5_000, "distinct shoppers"),
                 stock=(1_000, "units of the flash-sale SKU"), price=(4_999, "price in minor units"),
                 rate_limit=("8/min", "RATE_LIMIT_CHECKOUT for gunicorn"),
                 wave=(500, "shoppers arrive in waves of this many (0: one wave, every shopper's attempts spread over "
                       "the whole sale)"), healthz_requests=(10_000, "GET /healthz per measurement"),
                 refused_requests=(20_000, "checkouts of the refused phase (at most the rate limit per shopper)"),
                 no_sql_probe=(False, "serve config.wsgi unwrapped (no per-request SQL count)"),
                 no_pg_stat=(False, "skip the pg_stat_database cross-check"),
                 no_cleanup=(False, "leave the drill's orders, sale and carts in place"),
                 seed=(7, "random seed of the shoppers' order"))  # fmt: skip
    p.add_argument("--mode", choices=("direct", "queue"), default="direct",
                   help="the sale's mode (queue: a checkout topic of the run's own and write_queued_orders)")
    args = p.parse_args(argv)
    if args.shoppers < 1 or args.attempts < args.shoppers or args.stock < 1 or args.concurrency < 1:
        p.error("need --shoppers >= 1, --attempts >= --shoppers, --stock >= 1, --concurrency >= 1")
    if args.stock >= args.shoppers:
        p.error("--stock must be below --shoppers (somebody has to be refused)")
    return args


_probe = None


def sql_probe(environ, start_response):
    """config.wsgi's application, with the number of SQL statements the request's thread sent
    through Django in a response header X-Bench-SQL: "total,token lookups,flash-sale list loads".
    Served by the drill's gunicorn as bench.flash_sale:sql_probe (--no-sql-probe: config.wsgi)."""
    global _probe
    if _probe is None:
        application = importlib.import_module("config.wsgi").application  # sets Django up: models after it
        from knox.models import AuthToken

        from inventory.models import FlashSale

        _probe = application, f'"{AuthToken._meta.db_table}"', f'"{FlashSale._meta.db_table}"'
    application, token_table, flash_table = _probe
    counts = [0, 0, 0]

    def count(execute, sql, params, many, context):
        counts[0] += 1
        if token_table in sql:
            counts[1] += 1
        elif flash_table in sql:
            counts[2] += 1
        return execute(sql, params, many, context)

    def counting_start_response(status, headers, exc_info=None):
        headers.append(("X-Bench-SQL", ",".join(map(str, counts))))
        return start_response(status, headers, exc_info)

    with connection.execute_wrapper(count):
        return application(environ, counting_start_response)


def sale_state(customer_ids: list[int]) -> dict:
    from inventory import gate
    from inventory.models import Stock

    with connection.cursor() as cursor:
        cursor.execute("SELECT o.customer_id, count(*) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE "
                       "o.customer_id = ANY(%s) AND i.sku = %s AND o.status <> 'REJECTED' GROUP BY o.customer_id",
                       [customer_ids, SKU])  # fmt: skip
        per_customer = dict(cursor.fetchall())
    stock = Stock.objects.filter(product_id=SKU).values("available", "reserved").first() or {}
    counter = gate.counters(skus=[SKU])[SKU]
    return {"orders": sum(per_customer.values()), "winners": set(per_customer), "available": stock.get("available"),
            "max_per_customer": max(per_customer.values(), default=0), "reserved": stock.get("reserved"),
            "counter": counter["remaining"], "gate_refused": counter["refused"]}  # fmt: skip


def watch_queue(stop: threading.Event, seen: dict) -> None:
    """Queue mode: when the SKU's queue depth (admitted, not yet written; lowered after the writer's commit)
    last fell to 0, as time.monotonic(), polled every 5 ms."""
    from orders.services.queue import queue_depths

    busy = False
    while not stop.is_set():
        depth = queue_depths().get(SKU, 0)
        if busy and depth <= 0:
            seen["drained"] = time.monotonic()
        busy = depth > 0
        time.sleep(0.005)


def pg_xacts() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database "
                       "WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def plan(people: list[h.Shopper], count: int, wave: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """`count` checkouts spread evenly over `people`, wave after wave of `wave` shoppers; within a wave,
    round after round, each round a new random order of the wave's shoppers. (tokens, who per request)"""
    people = list(people)
    rng.shuffle(people)
    base, extra = divmod(count, len(people))
    tries = [base + (1 if i < extra else 0) for i in range(len(people))]
    who = []
    for start in range(0, len(people), wave):
        group = range(start, min(start + wave, len(people)))
        for r in range(max(tries[i] for i in group)):
            batch = [i for i in group if tries[i] > r]
            rng.shuffle(batch)
            who += batch
    return [s.token for s in people], who


def lat(records) -> str:
    return h.latency([r[1] for r in records])


def sql(records) -> tuple[str, int | None, int | None]:
    """(summary, statements, statements other than token lookups and flash-sale list loads)"""
    counts = [r[3] for r in records if r[3] is not None]
    if not counts:
        return "not measured", None, None
    total, token, flash = (sum(c[i] for c in counts) for i in range(3))
    other = total - token - flash
    return (f"{total:,} statements in {sum(1 for c in counts if c[0]):,} of {len(counts):,} requests (token lookups "
            f"{token:,}, flash-sale list {flash:,}, anything else {other:,})"), total, other


def print_statuses(phase: h.Run) -> None:
    print(f"  {'status':<8}{'code':<22}{'count':>9}   latency / SQL")
    for (status, code), count in sorted(Counter((r[0], r[2]) for r in phase.records).items()):
        records = phase.by(lambda r, s=status, c=code: r[0] == s and r[2] == c)
        print(f"  {status:<8}{code:<22}{count:>9,}   {lat(records)}; SQL: {sql(records)[0]}")


def fetch_metrics(server) -> dict[tuple[str, str], float]:
    status, body = h.http_call(server.base_url, "GET", "/metrics", {"Authorization": f"Bearer {METRICS_TOKEN}"})
    if status != 200:
        raise RuntimeError(f"GET /metrics: {status} {body[:200]!r}")
    return {(m[1], m[2] or ""): float(m[3]) for m in re.finditer(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$",
                                                                   body.decode(), re.MULTILINE)}  # fmt: skip


def main(argv=None, results: dict | None = None) -> int:
    """The drill; `results` (if given) receives its figures (bench.queue compares the two modes)."""
    args = parse_args(argv)
    t_start = time.perf_counter()
    h.setup()
    from core.ratelimit import parse_rate
    from inventory.services.flash_sales import seed_flash_sale
    from orders.services.queue import forget_queue, queue_depths

    rate_count, _ = parse_rate(args.rate_limit)
    run_id, rng, queue = uuid.uuid4().hex[:8], random.Random(args.seed), args.mode == "queue"
    topic_env = h.queue_topic(f"bench.flash.{run_id}") if queue else {}
    print(f"flash-sale drill {run_id}, {args.mode} mode: {h.where()} (gate {settings.CACHES['gate']['LOCATION']})")
    t0 = time.perf_counter()
    h.leftovers(h.delete_orders(h.user_ids(PREFIX)))
    forget_queue(sku=SKU)
    seed_flash_sale(sku=SKU, stock=args.stock, price=args.price, name="Flash drill item", mode=args.mode)
    shoppers = h.ensure_shoppers(args.shoppers, prefix=PREFIX)
    customer_ids = [s.user_id for s in shoppers]
    h.fill_carts([(cid, {SKU: 1}) for cid in customer_ids])
    state0 = sale_state(customer_ids)
    print(f"data ready in {time.perf_counter() - t0:.1f} s: {SKU} seeded with {args.stock} units (DB available "
          f"{state0['available']}, reserved {state0['reserved']}, gate counter {state0['counter']}), "
          f"{len(shoppers):,} shoppers {shoppers[0].username}..{shoppers[-1].username} with tokens, "
          f"each with the cart {{{SKU}: 1}}")  # fmt: skip
    if (state0["available"], state0["reserved"], state0["counter"]) != (args.stock, 0, args.stock):
        print("warning: the SKU did not start at available = stock, reserved = 0, counter = stock", file=sys.stderr)

    metrics_dir = tempfile.mkdtemp(prefix="bench-flash-metrics-")
    env = {**h.PRODUCTION_LIKE_ENV, "RATE_LIMIT_CHECKOUT": args.rate_limit, "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
           "METRICS_TOKEN": METRICS_TOKEN, **topic_env}
    h.warn_if_busy()
    phases: dict[str, h.Run] = {}
    pg, seen, stop = None, {}, threading.Event()
    writer = h.queue_writer(env) if queue else None
    celery = h.Child("celery", [str(h.VENV_BIN / "celery"), "-A", "config", "worker", "--concurrency", "1",
                                "--loglevel", "WARNING", "--hostname", f"flash-drill-{run_id}@%h"], env, group=True)

    def run(name: str, count: int, prefix: str, tokens=(), who=()) -> h.Run:
        moved = "every worker then reloaded tokens and the flash-sale list from PostgreSQL"
        with h.generation_watch(name, moved), tqdm(total=count, desc=name, unit="req", file=sys.stderr,
                                                   dynamic_ncols=True) as bar:  # fmt: skip
            return h.run_wrk(server, numbered=(f"fd{run_id}-{prefix}-", tokens, who), count=count, record=True,
                             concurrency=args.concurrency, threads=args.client_threads, progress=bar)  # fmt: skip

    try:
        celery.start()
        if writer:  # its consumer group joined: it has skipped a message that is not a checkout request
            writer.start()
            h.produce(settings.KAFKA_CHECKOUT_TOPIC, [(b"warm-up", b"warm-up")])
            h.wait_until(lambda: "not a checkout request" in writer.tail(), 60, "write_queued_orders not reading",
                         writer)  # fmt: skip
        app = "config.wsgi" if args.no_sql_probe else "bench.flash_sale:sql_probe"
        with h.Gunicorn(workers=args.workers, threads=args.threads, env=env, app=app) as server:
            print(f"gunicorn {server.base_url}: {args.workers} workers x {args.threads} threads, DEBUG off, "
                  f"RATE_LIMIT_CHECKOUT={args.rate_limit}, PROMETHEUS_MULTIPROC_DIR={metrics_dir}, "
                  f"{'no SQL probe' if args.no_sql_probe else 'SQL probe on'}; celery worker pid {celery.proc.pid}; "
                  f"client wrk, {args.concurrency} connections")  # fmt: skip
            auth = {"Authorization": f"Token {shoppers[-1].token}"}
            status, body = h.http_call(server.base_url, "GET", "/api/cart", auth)
            if status != 200 or SKU.encode() not in body:
                raise SystemExit(f"GET /api/cart of {shoppers[-1].username}: {status} {body[:300]!r}")
            metrics_before = fetch_metrics(server)
            run("warm-up /healthz", 2000, "w")  # connections and /healthz only
            phases["healthz0"] = run("GET /healthz (before the sale)", args.healthz_requests, "h0")
            tokens, who = plan(shoppers, args.attempts, args.wave or len(shoppers), rng)
            watcher = threading.Thread(target=watch_queue, args=(stop, seen), daemon=True)
            watcher.start() if queue else None
            phases["sale"] = run("sale", args.attempts, "sale", tokens, who)
            deadline = time.monotonic() + 60
            while queue and queue_depths().get(SKU, 0) > 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # the winners are known once their orders are written
            stop.set()

            state = sale_state(customer_ids)
            losers = [s for s in shoppers if s.user_id not in state["winners"]]
            per_loser = min(rate_count, max(1, math.ceil(args.refused_requests / max(1, len(losers)))))
            refused_count = min(args.refused_requests, per_loser * len(losers))
            h.fill_carts([(s.user_id, {SKU: 1}) for s in losers])  # their carts as they were, rate limits reset
            phases["healthz1"] = run("GET /healthz (before the refused phase)", args.healthz_requests, "h1")
            xacts0, pg_t0 = (None, 0.0) if args.no_pg_stat else (pg_xacts(), time.monotonic())
            tokens, who = plan(losers, refused_count, len(losers), rng)
            phases["refused"] = run("refused", refused_count, "refused", tokens, who)
            phases["healthz2"] = run("GET /healthz (after the refused phase)", args.healthz_requests, "h2")
            if xacts0 is not None:
                print(f"pg_stat_database: waiting {PG_FLUSH_SECONDS:.0f} s for the backends' statistics, then an "
                      "idle window of the same length...", file=sys.stderr)  # fmt: skip
                time.sleep(PG_FLUSH_SECONDS)
                xacts1, window = pg_xacts(), time.monotonic() - pg_t0
                time.sleep(window)
                pg = {"window": window, "busy": xacts1 - xacts0, "idle": pg_xacts() - xacts1}
            metrics_after = fetch_metrics(server)
            celery_alive = celery.alive()
    finally:
        stop.set()
        celery.stop()
        if writer:
            writer.stop()
            print(f"topic {settings.KAFKA_CHECKOUT_TOPIC} {h.delete_topics([settings.KAFKA_CHECKOUT_TOPIC])}")
            forget_queue(sku=SKU)
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if not args.no_cleanup:
            done, ended = h.delete_orders(h.user_ids(PREFIX)), h.end_sale(SKU)

    sale, refused = phases["sale"], phases["refused"]
    ok = 202 if queue else 201  # the status of an admitted checkout
    admitted, r409, r429 = (sale.by(lambda r, s=s: r[0] == s) for s in (ok, 409, 429))
    r5xx = sale.by(lambda r: r[0] >= 500)
    others = sale.by(lambda r: r[0] not in (ok, 409, 429) and r[0] < 500)
    print(f"\nTHE SALE: {sale.answered:,} of {sale.sent:,} checkout attempts answered in {sale.seconds:.1f} s = "
          f"{sale.rps:,.0f} requests/s ({sale.client} -c{sale.concurrency}); {sale.errors} socket errors/timeouts; "
          f"gunicorn CPU {sale.cpu_ms:.2f} ms/request")  # fmt: skip
    print_statuses(sale)
    print(f"  {ok} {'queued' if queue else 'created'} {len(admitted):,}; 409 refused {len(r409):,}; "
          f"429 rate-limited {len(r429):,}; 5xx {len(r5xx):,}; other {len(others):,} "
          f"({dict(Counter((r[0], r[2]) for r in others))})")  # fmt: skip
    print(f"  latency of refused (409): {lat(r409)}; of admitted ({ok}): {lat(admitted)}; of 429: {lat(r429)}")
    began = min(r[4] - r[1] / 1000 for r in sale.records)  # when the first request was sent
    first = [r for r in admitted if r[4] - r[1] / 1000 < began + 1]
    print(f"  admitted ({ok}) sent in the sale's first second: {len(first):,}, {lat(first)}; later: "
          f"{len(admitted) - len(first):,}, {lat([r for r in admitted if r not in first])}")
    by_second: dict[int, list] = {}
    for r in admitted:
        by_second.setdefault(int(r[4] - r[1] / 1000 - began), []).append(r)
    print(f"  admitted ({ok}) by the second they were sent in (count p50/p99 ms): " + ", ".join(
        f"{s}s {len(rs)} {h.pct([r[1] for r in rs], 50):.0f}/{h.pct([r[1] for r in rs], 99):.0f}"
        for s, rs in sorted(by_second.items())))  # fmt: skip
    print(f"  SQL of refused (409) requests: {sql(r409)[0]}")
    print(f"  SQL of 429 requests: {sql(r429)[0]}")
    print(f"  (token lookups: each worker caches a token 60 s, so at most {len(shoppers):,} shoppers x "
          f"{args.workers} workers a minute read theirs from PostgreSQL, whatever the status)")  # fmt: skip

    refused_5xx, stock_after = refused.by(lambda r: r[0] >= 500), f"{state['available']}/{state['reserved']}"
    checks = [
        ("orders created (DB) == stock", state["orders"] == args.stock, f"{state['orders']:,} orders for {SKU} in "
         f"the DB ({ok} responses: {len(admitted):,}; at most {state['max_per_customer']} per shopper)"),
        ("5xx == 0", not r5xx and not refused_5xx, f"{len(r5xx)} in the sale, {len(refused_5xx)} in the refused phase"),
        ("429s occur but do not dominate", 0 < len(r429) < sale.answered / 2, f"{len(r429):,} of {sale.answered:,}"),
        (f"DB available/reserved == 0/{args.stock}", stock_after == f"0/{args.stock}", stock_after),
        ("Redis gate counter == 0", state["counter"] == 0,
         f"{state['counter']} (gate refusals counted in Redis: {state['gate_refused']:,})"),
    ]  # fmt: skip
    last_admission = max((r[4] for r in admitted), default=None)
    if queue:
        lag = seen["drained"] - last_admission if "drained" in seen and admitted else float("inf")
        checks.append((f"last order written <= {WRITE_LAG_GOAL:g} s after the last admission", lag <= WRITE_LAG_GOAL,
                       f"{lag:.2f} s (queue depth back to 0, polled every 5 ms; the last {ok} answered)"))

    print(f"\nREFUSED PHASE (after the sale, rate-limit windows reset, {len(losers):,} shoppers without an order, "
          f"{per_loser} checkouts each at most): {refused.answered:,} answered in {refused.seconds:.1f} s = "
          f"{refused.rps:,.0f} requests/s; gunicorn CPU {refused.cpu_ms:.2f} ms/request")  # fmt: skip
    print_statuses(refused)
    hz = [phases[f"healthz{i}"] for i in range(3)]
    for label, phase in zip(("before the sale", "just before the refused phase", "just after it"), hz, strict=True):
        print(f"GET /healthz {label}: {phase.rps:,.0f} requests/s, CPU {phase.cpu_ms:.2f} ms/request, "
              f"{lat(phase.records)}, non-200: {len(phase.by(lambda r: r[0] != 200))}")  # fmt: skip
    ref409 = refused.by(lambda r: r[0] == 409)
    hz_rps = statistics.mean([hz[1].rps, hz[2].rps])
    ratio = len(ref409) / refused.seconds / hz_rps if refused.seconds and hz_rps else 0.0
    cpu_ratio = statistics.mean([hz[1].cpu_ms, hz[2].cpu_ms]) / refused.cpu_ms if refused.cpu_ms else 0.0
    checks.append((f"refused req/s / healthz req/s >= {RATIO_GOAL}", ratio >= RATIO_GOAL,
                   f"{ratio * hz_rps:,.0f} / {hz_rps:,.0f} (mean of the two /healthz runs around it) = {ratio:.2f}; "
                   f"by gunicorn CPU per request (healthz's over the refusal's): {cpu_ratio:.2f}"))  # fmt: skip
    (sale_sql, sale_total, sale_other), (ref_sql, ref_total, ref_other) = sql(r409), sql(ref409)
    if sale_total is not None:
        checks += [("SQL by refused requests == 0", sale_total + (ref_total or 0) == 0,
                    f"sale: {sale_sql}; refused phase: {ref_sql}"),
                   ("  ...other than token-cache loads == 0", sale_other == 0 and not ref_other,
                    f"sale {sale_other}, refused phase {ref_other}")]  # fmt: skip
    if pg:
        estimate, name = pg["busy"] - pg["idle"], connection.settings_dict["NAME"]
        verdict = (f"about {estimate:,} attributable to the refused phase"
                   if estimate >= 0 and pg["idle"] <= max(100, pg["busy"] // 2)
                   else "INCONCLUSIVE: other clients used the database heavily during one of the windows")  # fmt: skip
        print(f"pg_stat_database (xact_commit + xact_rollback of {name}): {pg['busy']:,} transactions over the "
              f"refused phase + /healthz + {PG_FLUSH_SECONDS:.0f} s flush wait ({pg['window']:.1f} s), {pg['idle']:,} "
              f"over an idle window as long just after (background: this bench's Celery worker, other clients) "
              f"-> {verdict}" + (f"; the SQL probe counted {ref_total:,} statements in the refused phase's 409s "
                                 "(each costs a transaction, plus a health-check `SELECT 1` per request that queries)"
                                 if ref_total is not None else ""))  # fmt: skip

    print("\nMETRICS (/metrics after - before, all gunicorn workers via PROMETHEUS_MULTIPROC_DIR):")
    for (name, labels), value in sorted(metrics_after.items()):
        if name in METRICS:
            print(f"  {name}{labels}: +{value - metrics_before.get((name, labels), 0.0):,.0f}")
    gauge = f'shop_gate_remaining{{sku="{SKU}"}}'
    print(f"  {gauge} after: {metrics_after.get(('shop_gate_remaining', gauge[19:]), 'absent')}")
    if not celery_alive:
        print(f"warning: the Celery worker had exited before the end (log {celery.log.name})", file=sys.stderr)

    if results is not None:
        results.update(stock=args.stock, orders=state["orders"], r5xx=len(r5xx) + len(refused_5xx), db=stock_after,
                       counter=state["counter"], sql=None if sale_total is None else sale_total + (ref_total or 0),
                       p50=h.pct([r[1] for r in admitted], 50), p99=h.pct([r[1] for r in admitted], 99),
                       lag=lag if queue else None, missed=[label.strip() for label, good, _ in checks if not good])
    ok = h.print_checks(checks, "CHECKS")
    if args.no_cleanup:
        print("cleanup skipped (--no-cleanup): the next run removes the drill's orders first")
    else:
        print(f"cleanup: {done['orders']:,} orders, {done['events']:,} outbox events and {done['markers']:,} replay "
              f"markers deleted, reservations given back, flash sale {'ended' if ended else 'was not open'}, "
              f"carts and rate-limit windows deleted")  # fmt: skip
    print(f"total time {time.perf_counter() - t_start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
