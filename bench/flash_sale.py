"""The flash-sale drill: a sale over HTTP, then refusals only; the checks at the end (bench/README.md).

python -m bench.flash_sale [--mode queue] [--gate-redis own] [--rounds 5]
                           [--attempts 5000 --shoppers 500 --stock 100 --refused-requests 2000]"""

import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter

from django.conf import settings
from django.db import connection
from django_redis import get_redis_connection
from knox.models import AuthToken
from redis import Redis

from bench import harness as h
from cart.storage import VOUCHER_FIELD
from core.ratelimit import parse_rate
from inventory import gate
from inventory.models import FlashSale, Stock
from inventory.services.flash_sales import seed_flash_sale
from orders.services.queue_admission import queue_depths
from shop.models import Promotion, VoucherRedemption
from shop.promotions import create_voucher

SKU, PRICE, VOUCHER = "FLASH-DRILL", 4_999, "FLASH-DRILL-V"
PREFIX = "flash-"  # drill shoppers: flash-00001...
RATE_LIMIT, WAVE = "8/min", 500  # RATE_LIMIT_CHECKOUT for gunicorn; shoppers arrive in waves of this many
RATIO_GOAL = 0.85  # issue 48 (0.6 since issue 26, 0.5 before): median of the rounds
GATE_COMMANDS_GOAL = 0.05  # issue 48: the gate's Redis commands per refusal once sold out, "about 0"
GATE_PORT = 6393  # --gate-redis own: the gate's Redis, started by the bench (no disk)
WRITE_LAG_GOAL = 2.0  # queue mode: seconds from the last admission (202) to the last order written
TOKEN_TABLE, FLASH_TABLE = f'"{AuthToken._meta.db_table}"', f'"{FlashSale._meta.db_table}"'


def parse_args(argv=None):
    mode = "the sale's mode (queue: a checkout topic of the run's own and write_queued_orders)"
    return h.parse(
        argv,
        __doc__,
        *("concurrency", "workers", "threads", "client_threads", "rounds"),
        concurrency=64,
        rounds=(5, "refused phases, each between two /healthz runs; the ratio is their median"),
        attempts=(50_000, "checkout attempts in the sale"),
        shoppers=(5_000, "distinct shoppers"),
        stock=(1_000, "units of the flash-sale SKU"),
        healthz_requests=(10_000, "GET /healthz per run"),
        refused_requests=(12_000, "checkouts of each refused phase (at most the rate limit per shopper)"),
        voucher_uses=(1_000, "the usage limit of the voucher every cart holds (10%% off, once a shopper)"),
        no_sql_probe=(False, "serve config.wsgi unwrapped (no per-request SQL count)"),
        mode=("direct", mode, ("direct", "queue")),
        gate_redis=("shared", "the gate on the carts' Redis (shared) or on a Redis of its own", ("shared", "own")),
        valid=lambda a: 1 <= a.stock < a.shoppers <= a.attempts and a.voucher_uses >= a.stock,
        error="need 1 <= --stock < --shoppers <= --attempts (somebody has to be refused), --voucher-uses >= --stock",
    )


def sql_probe(environ, start_response):
    """config.wsgi with the request's SQL statements in a header X-Bench-SQL: "total,token lookups,flash-sale list"."""

    def counting_start_response(status, headers, exc_info=None):
        headers.append(("X-Bench-SQL", ",".join(map(str, counts))))
        return start_response(status, headers, exc_info)

    with h.counting_sql(TOKEN_TABLE, FLASH_TABLE) as counts:
        return h.wsgi_application()(environ, counting_start_response)


def own_gate_redis() -> dict:
    """A Redis for the gate alone on GATE_PORT, for this process and the children it starts (env)."""
    server = ["redis-server", "--port", str(GATE_PORT), "--save", "", "--appendonly", "no", "--daemonize", "yes"]
    if subprocess.run(["redis-cli", "-p", str(GATE_PORT), "ping"], capture_output=True).returncode == 0:
        raise SystemExit(f"something already answers on port {GATE_PORT}: stop it, or run with --gate-redis shared")
    subprocess.run(server, check=True, capture_output=True)
    h.wait_until(lambda: Redis(port=GATE_PORT).ping(), 10, "the gate's Redis did not start")
    url = f"redis://127.0.0.1:{GATE_PORT}/0"
    settings.CACHES["gate"]["LOCATION"] = os.environ["GATE_REDIS_URL"] = url  # before this process's first gate call
    return {"GATE_REDIS_URL": url}


def stop_own_gate_redis() -> None:
    subprocess.run(["redis-cli", "-p", str(GATE_PORT), "shutdown", "nosave"], capture_output=True)


def commands(redis: Redis) -> tuple[int, int]:
    """(every command, EVALSHA) the server has run, INFO's own calls left out."""
    stats = redis.info("commandstats")
    total = sum(stat["calls"] for name, stat in stats.items() if name != "cmdstat_info")
    return total, stats.get("cmdstat_evalsha", {}).get("calls", 0)


def sale_state(customer_ids: list[int]) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT o.customer_id, count(*) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE "
            "o.customer_id = ANY(%s) AND i.sku = %s AND o.status <> 'REJECTED' GROUP BY o.customer_id",
            [customer_ids, SKU],
        )
        per_customer = dict(cursor.fetchall())
    stock = Stock.objects.filter(product_id=SKU).values("available", "reserved").first() or {}
    counter, orders = gate.counters(skus=[SKU])[SKU], per_customer.values()
    state = dict(orders=sum(orders), winners=set(per_customer), max_per_customer=max(orders, default=0))
    state |= dict(available=stock.get("available"), reserved=stock.get("reserved"))
    return state | dict(counter=counter["remaining"], gate_refused=counter["refused"])


def watch_queue(stop: threading.Event, seen: dict) -> None:
    """Queue mode: when the SKU's queue depth last fell to 0 (time.monotonic(), polled every 5 ms)."""
    busy = False
    while not stop.is_set():
        depth = queue_depths().get(SKU, 0)
        if busy and depth <= 0:
            seen["drained"] = time.monotonic()
        busy = depth > 0
        time.sleep(0.005)


def plan(people: list[h.Shopper], count: int, wave: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """`count` checkouts spread evenly over `people`, wave after wave; each round of a wave in a new random order."""
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


def sql(records) -> tuple[str, int | None, int | None]:  # (summary, statements, others than the cached loads)
    counts = [r[3] for r in records if r[3] is not None]
    if not counts:
        return "not measured", None, None
    total, token, flash = (sum(c[i] for c in counts) for i in range(3))
    other = total - token - flash
    summary = f"{total:,} statements in {sum(1 for c in counts if c[0]):,} of {len(counts):,} requests"
    return f"{summary} (token lookups {token:,}, flash-sale list {flash:,}, anything else {other:,})", total, other


def print_phase(title: str, phase: h.Run, answered: str, client: str = "") -> None:
    """The phase's heading (`answered` in its seconds, requests/s, gunicorn CPU), then its statuses."""
    rate = f"{answered} answered in {phase.seconds:.1f} s = {phase.rps:,.0f} requests/s{client}"
    print(f"\n{title}: {rate}; gunicorn CPU {phase.cpu_ms:.2f} ms/request")
    print(f"  {'status':<8}{'code':<22}{'count':>9}   latency / SQL")
    for (status, code), count in sorted(Counter((r[0], r[2]) for r in phase.records).items()):
        records = phase.by(lambda r, s=status, c=code: r[0] == s and r[2] == c)
        print(f"  {status:<8}{code:<22}{count:>9,}   {lat(records)}; SQL: {sql(records)[0]}")


def cleanup() -> None:
    h.delete_orders(h.user_ids(PREFIX))
    Promotion.objects.filter(code=VOUCHER).delete()  # its uses were given back with the orders
    h.end_sale(SKU)  # and its queue


def main(argv=None, results: dict | None = None) -> int:
    """The drill; `results` (if given) receives its figures (bench.queue compares the two modes)."""
    args = parse_args(argv)
    h.setup()
    run_id, rng, queue = uuid.uuid4().hex[:8], random.Random(7), args.mode == "queue"
    topic_env = h.queue_topic(f"bench.flash.{run_id}") if queue else {}
    gate_env = own_gate_redis() if args.gate_redis == "own" else {}  # before this process's first gate call
    cleanup()  # a killed run's
    seed_flash_sale(sku=SKU, stock=args.stock, price=PRICE, name="Flash drill item", mode=args.mode)
    voucher = create_voucher(code=VOUCHER, percent=10, usage_limit=args.voucher_uses, per_customer_limit=1)
    shoppers = h.ensure_shoppers(args.shoppers, prefix=PREFIX)
    customer_ids, cart = [s.user_id for s in shoppers], {SKU: 1, VOUCHER_FIELD: VOUCHER}
    h.fill_carts([(cid, cart) for cid in customer_ids])

    metrics_dir = tempfile.mkdtemp(prefix="bench-flash-metrics-")
    env = {**h.PRODUCTION_LIKE_ENV, "RATE_LIMIT_CHECKOUT": RATE_LIMIT, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    env |= topic_env | gate_env
    phases, seen, stop = {}, {}, threading.Event()  # name -> h.Run; when the queue drained
    gate_commands = []  # per refused phase: (commands, EVALSHA) on the gate's Redis
    writer = h.queue_writer(env) if queue else None
    worker = f"-A config worker --concurrency 1 --loglevel WARNING --hostname flash-drill-{run_id}@%h"
    celery = h.Child("celery", [str(h.VENV_BIN / "celery"), *worker.split()], env, group=True)
    load = {"record": True, "concurrency": args.concurrency, "threads": args.client_threads}

    def run(count: int, prefix: str, tokens=(), who=()) -> h.Run:
        return h.run_wrk(server, numbered=(f"fd{run_id}-{prefix}-", tokens, who), count=count, **load)

    try:
        celery.start()
        if writer:  # its consumer group joined: it has skipped a message that is not a checkout request
            writer.start()
            h.produce(settings.KAFKA_CHECKOUT_TOPIC, [h.WARM_UP])
            reading = lambda: "not a checkout request" in writer.tail()  # noqa: E731
            h.wait_until(reading, 60, "write_queued_orders not reading", writer)
        app = "config.wsgi" if args.no_sql_probe else "bench.flash_sale:sql_probe"
        with h.Gunicorn(workers=args.workers, threads=args.threads, env=env, app=app) as server:
            item = f"{SKU} with {args.stock} units, {len(shoppers):,} shoppers, the gate on {args.gate_redis} Redis"
            server_ = f"gunicorn {args.workers} x {args.threads} threads, RATE_LIMIT_CHECKOUT={RATE_LIMIT}"
            probe = f"{'no SQL probe' if args.no_sql_probe else 'SQL probe on'}; wrk, {args.concurrency} connections"
            print(f"flash-sale drill {run_id}, {args.mode} mode: {item}; {server_}, {probe}")
            run(2000, "w")  # warm-up: connections and /healthz only
            phases["healthz0"] = run(args.healthz_requests, "h0")
            tokens, who = plan(shoppers, args.attempts, WAVE, rng)
            watcher = threading.Thread(target=watch_queue, args=(stop, seen), daemon=True)
            watcher.start() if queue else None
            phases["sale"] = run(args.attempts, "sale", tokens, who)
            # the winners are known once their orders are written
            h.wait_until(lambda: not queue or queue_depths().get(SKU, 0) <= 0, 60, None, every=0.01)
            stop.set()

            state = sale_state(customer_ids)
            voucher.refresh_from_db(fields=["uses"])
            redeemed = VoucherRedemption.objects.filter(voucher=voucher).count(), voucher.uses
            losers = [s for s in shoppers if s.user_id not in state["winners"]]
            per_loser = min(parse_rate(RATE_LIMIT)[0], max(1, math.ceil(args.refused_requests / max(1, len(losers)))))
            refused_count = min(args.refused_requests, per_loser * len(losers))
            gate_redis = get_redis_connection("gate")
            for i in range(args.rounds):  # /healthz, refusals, /healthz, refusals, ... /healthz
                h.fill_carts([(s.user_id, cart) for s in losers])  # their carts as they were, rate limits reset
                phases[f"healthz{i + 1}"] = run(args.healthz_requests, f"h{i + 1}")
                tokens, who = plan(losers, refused_count, len(losers), rng)
                before = commands(gate_redis)
                phases[f"refused{i}"] = run(refused_count, f"refused{i}", tokens, who)
                gate_commands.append(tuple(b - a for a, b in zip(before, commands(gate_redis), strict=True)))
            phases[f"healthz{args.rounds + 1}"] = run(args.healthz_requests, f"h{args.rounds + 1}")
    finally:
        stop.set()
        celery.stop()
        if writer:
            writer.stop()
            h.delete_topics([settings.KAFKA_CHECKOUT_TOPIC])
        shutil.rmtree(metrics_dir, ignore_errors=True)
        cleanup()
        if args.gate_redis == "own":
            stop_own_gate_redis()

    sale = phases["sale"]
    refused_runs = [phases[f"refused{i}"] for i in range(args.rounds)]
    summed = {
        name: sum(getattr(run, name) for run in refused_runs) for name in ("sent", "answered", "seconds", "errors")
    }
    summed |= {"cpu_seconds": sum(run.cpu_seconds for run in refused_runs), "p50_ms": 0.0, "p99_ms": 0.0}
    records = [r for run in refused_runs for r in run.records]
    refused = h.Run(refused_runs[0].client, refused_runs[0].concurrency, bad_status=0, records=records, **summed)
    ok = 202 if queue else 201  # the status of an admitted checkout
    admitted, r409, r429 = (sale.by(lambda r, s=s: r[0] == s) for s in (ok, 409, 429))
    r5xx = sale.by(lambda r: r[0] >= 500)
    client = f" ({sale.client} -c{sale.concurrency}); {sale.errors} socket errors/timeouts"
    print_phase("THE SALE", sale, f"{sale.answered:,} of {sale.sent:,} checkout attempts", client)
    began = min(r[4] - r[1] / 1000 for r in sale.records)  # when the first request was sent
    first = [r for r in admitted if r[4] - r[1] / 1000 < began + 1]
    later = f"{len(admitted) - len(first):,}, {lat([r for r in admitted if r not in first])}"
    print(f"  admitted ({ok}) sent in the sale's first second: {len(first):,}, {lat(first)}; later: {later}")

    refused_5xx, stock_after = refused.by(lambda r: r[0] >= 500), f"{state['available']}/{state['reserved']}"
    orders, gate_left, uses = state["orders"], state["counter"], f"{args.voucher_uses:,}"
    vouchers = f"{redeemed[0]:,} redemptions, uses {redeemed[1]:,}, limit {uses}, {orders:,} orders"
    want, refusals = (min(args.voucher_uses, orders),) * 2, state["gate_refused"]
    in_db = f"{orders:,} orders for {SKU} in the DB ({ok} responses: {len(admitted):,}; at most "
    checks = [
        ("orders created (DB) == stock", orders == args.stock, in_db + f"{state['max_per_customer']} per shopper)"),
        ("5xx == 0", not r5xx and not refused_5xx, f"{len(r5xx)} in the sale, {len(refused_5xx)} in the refused phase"),
        ("429s occur but do not dominate", 0 < len(r429) < sale.answered / 2, f"{len(r429):,} of {sale.answered:,}"),
        (f"DB available/reserved == 0/{args.stock}", stock_after == f"0/{args.stock}", stock_after),
        (f"voucher redemptions == its {uses} uses or the orders", redeemed == want, vouchers),
        ("Redis gate counter == 0", gate_left == 0, f"{gate_left} (gate refusals counted in Redis: {refusals:,})"),
    ]
    if queue:
        lag = seen["drained"] - max(r[4] for r in admitted) if "drained" in seen and admitted else float("inf")
        detail = f"{lag:.2f} s (queue depth back to 0, polled every 5 ms; the last {ok} answered)"
        label = f"last order written <= {WRITE_LAG_GOAL:g} s after the last admission"
        checks.append((label, lag <= WRITE_LAG_GOAL, detail))

    who = f"after the sale, rate-limit windows reset, {len(losers):,} shoppers without an order, {per_loser} checkouts"
    print_phase(f"REFUSED PHASES, ALL {args.rounds} ({who} each at most, a phase)", refused, f"{refused.answered:,}")
    hz = [phases[f"healthz{i}"] for i in range(args.rounds + 2)]
    print(f"GET /healthz before the sale: {hz[0].rps:,.0f} requests/s, CPU {hz[0].cpu_ms:.2f} ms/request")
    heading = f"{'round':<7}{'/healthz before':>16}{'refused':>9}{'/healthz after':>15}{'ratio':>7}{'by CPU':>8}"
    print(f"\n{heading}   the gate's Redis")
    ratios, cpu_ratios, per_refusal = [], [], []
    for i, run_ in enumerate(refused_runs):
        before, after = hz[i + 1], hz[i + 2]
        hz_rps, hz_cpu = (before.rps + after.rps) / 2, (before.cpu_ms + after.cpu_ms) / 2
        ratios.append(len(run_.by(lambda r: r[0] == 409)) / run_.seconds / hz_rps if run_.seconds and hz_rps else 0.0)
        cpu_ratios.append(hz_cpu / run_.cpu_ms if run_.cpu_ms else 0.0)
        total, evalsha = gate_commands[i]
        per_refusal.append(total / run_.answered if run_.answered else float("inf"))
        gate_ = f"{total:,} commands ({evalsha:,} EVALSHA) = {per_refusal[-1]:.3f} a refusal"
        rates = f"{before.rps:>16,.0f}{run_.rps:>9,.0f}{after.rps:>15,.0f}{ratios[-1]:>7.2f}{cpu_ratios[-1]:>8.2f}"
        print(f"{i + 1:<7}{rates}   {gate_}")
    ratio, cpu_ratio = sorted(ratios)[(len(ratios) - 1) // 2], sorted(cpu_ratios)[(len(cpu_ratios) - 1) // 2]
    detail = f"median of {args.rounds}: {ratio:.2f} ({h.each(ratios)}); by gunicorn CPU per request "
    detail += f"(/healthz's over the refusal's): {cpu_ratio:.2f} ({h.each(cpu_ratios)})"
    checks.append((f"refused req/s / healthz req/s >= {RATIO_GOAL}", ratio >= RATIO_GOAL, detail))
    commands_each = sorted(per_refusal)[(len(per_refusal) - 1) // 2]
    where = "its own Redis" if args.gate_redis == "own" else "the one Redis: every command there counts"
    detail = f"median {commands_each:.3f} ({h.each(per_refusal, '.3f')}); the gate on {where}"
    label = f"gate Redis commands per refusal <= {GATE_COMMANDS_GOAL}"
    checks.append((label, commands_each <= GATE_COMMANDS_GOAL, detail))
    ref409 = refused.by(lambda r: r[0] == 409)
    (sale_sql, sale_total, sale_other), (ref_sql, ref_total, ref_other) = sql(r409), sql(ref409)
    refused_sql = None if sale_total is None else sale_total + (ref_total or 0)
    if refused_sql is not None:
        checks.append(("SQL by refused requests == 0", refused_sql == 0, f"sale: {sale_sql}; refused phase: {ref_sql}"))
        others = f"sale {sale_other}, refused phase {ref_other}"
        checks.append(("  ...other than token-cache loads == 0", sale_other == 0 and not ref_other, others))
    if results is not None:
        ms = [r[1] for r in admitted]
        results.update(stock=args.stock, orders=orders, r5xx=len(r5xx + refused_5xx), db=stock_after, counter=gate_left)
        results.update(sql=refused_sql, p50=h.pct(ms, 50), p99=h.pct(ms, 99), lag=lag if queue else None)
        results["missed"] = [label.strip() for label, good, _ in checks if not good]
    return 0 if h.print_checks(checks, "CHECKS") else 1


if __name__ == "__main__":
    sys.exit(main())
