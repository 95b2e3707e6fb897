"""Outbox relay throughput and commit-to-consumer lag (issue 6; bench/README.md).

    python -m bench.relay                                     # 50,000 events; 200 orders/s for 20 s
    python -m bench.relay --events 10000 --rounds 1 --rate 100 --seconds 5 [--profile]

Part 1: OutboxRelay().drain() on --events events against a producer that encodes the same envelopes
(goal >= 0.8; a producer of pre-encoded envelopes is shown too) and the case study's relay (the floor,
goal >= 20x). Part 2: relay_outbox and a real consumer as subprocesses, place_order at a steady --rate:
commit -> consumer effect lag (goal: p99 < 1 s)."""

import argparse
import contextlib
import cProfile
import io
import itertools
import json
import math
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from unittest import mock

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import Max
from django.utils import timezone

from bench import harness as h

PREFIX = "BENCH-RL-"
BENCH_MARK = "relay"  # payload["bench"] of the part-1 events: how a killed run's leftovers are found
AGGREGATE_BASE = 9_100_000_000  # fake order ids of the part-1 events (aggregate_id only, no FK)
LOCK_KEY = 0x42_52_4C_01
# issue 26: the relay against a producer that encodes the same envelopes in Python (it was 0.5 of the
# pre-encoded producer, which measures the broker and librdkafka more than any relay).
GOALS = {"encoding": 0.8, "floor": 20.0, "p99_ms": 1000.0}


def parse_args(argv=None):
    p = h.parser(__doc__, "check", events=(50_000, "outbox events of part 1"),
                 aggregates=(10_000, "distinct aggregate_ids"), floor_events=(2_000, "events sent one by one"),
                 rounds=(3, "part-1 rounds, median reported"), rate=(200.0, "orders/s of part 2"),
                 seconds=(20.0, "duration of part 2"), threads=(8, "place_order threads of part 2"),
                 skus=(20, "products of part 2"), no_vacuum=(False, "no VACUUM ANALYZE of outbox_events before timing"),
                 consumer_all=(False, "the lag consumer also applies events other processes write meanwhile"),
                 skip_throughput=(False, "part 2 only"), skip_lag=(False, "part 1 only"),
                 profile=(False, "always show where drain() spends its time"),
                 profile_events=(10_000, "events of the profiled drain"))  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None, help="relay batch size (default: settings)")
    p.add_argument("--consumer-child", metavar="NAME", help=argparse.SUPPRESS)  # part 2's consumer process
    args = p.parse_args(argv)
    if min(args.events, args.rounds, args.threads, args.aggregates, args.floor_events, args.rate, args.seconds) <= 0:
        p.error("counts, --rate and --seconds must be positive")
    args.floor_events = min(args.floor_events, args.events)
    return args


def cleanup(consumer_names: list[str] = ()) -> dict[str, int]:
    """The part-1 events, BENCH-RL- shoppers' orders and the bench consumers' processed_events."""
    from outbox.models import ProcessedEvent

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM outbox_events WHERE aggregate_type = 'order' AND aggregate_id BETWEEN %s AND %s"
                       " AND payload->>'bench' = %s", [str(AGGREGATE_BASE), str(AGGREGATE_BASE + 59_999_999),
                                                       BENCH_MARK])  # fmt: skip
        synthetic = cursor.rowcount
    done = h.delete_orders(h.user_ids(PREFIX))
    consumers = ProcessedEvent.objects.filter(consumer__startswith="bench_lag_").values_list("consumer", flat=True)
    processed = ProcessedEvent.objects.filter(consumer__in=[*consumer_names, *consumers.distinct()]).delete()[0]
    return {"synthetic_events": synthetic, "orders": done["orders"], "order_events": done["events"],
            "skus_restored": done["skus_restored"], "processed_events": processed}  # fmt: skip


def envelope(event) -> tuple[bytes, bytes, list]:
    """The relay's message (key, value, headers), encoded in Python."""
    value = json.dumps({"event_id": str(event.event_id), "event_type": event.event_type,
                        "occurred_at": event.created_at.isoformat(), "aggregate_type": event.aggregate_type,
                        "aggregate_id": event.aggregate_id, "data": event.payload}, separators=(",", ":"))  # fmt: skip
    headers = [("event_id", str(event.event_id)), ("event_type", event.event_type),
               ("request_id", event.request_id or "")]  # fmt: skip
    return event.aggregate_id.encode(), value.encode(), headers


def insert_events(count: int, aggregates: int, base: int = AGGREGATE_BASE) -> list:
    """`count` OrderCreated-like events (2 items each), bulk-inserted; returns them."""
    from outbox.models import OutboxEvent

    expires = (timezone.now() + timedelta(minutes=15)).isoformat()

    def item(n: int, quantity: int) -> dict:
        return {"sku": f"{PREFIX}{1 + n % 20:04d}", "name": f"Bench product {1 + n % 20}", "quantity": quantity,
                "unit_price": 1001 + n % 20}  # fmt: skip

    return OutboxEvent.objects.bulk_create([OutboxEvent(
        aggregate_type="order", aggregate_id=str(base + i % aggregates), event_type="OrderCreated",
        payload={"order_id": base + i % aggregates, "customer_id": 100_000 + i % 5_000, "currency": "EUR",
                 "items": [item(i, 1 + i % 3), item(i + 7, 1)], "total": 3003 + i % 50, "expires_at": expires,
                 "bench": BENCH_MARK}) for i in range(count)], batch_size=5000)  # fmt: skip


def warm_up(producer, topic: str) -> float:
    """A new producer delivers one message: connected, with its idempotent producer id. Seconds taken."""
    began = time.perf_counter()
    producer.produce(topic, b"warm-up", b"warm-up")
    if producer.flush(30):
        raise RuntimeError("the warm-up message was not delivered within 30 s")
    return time.perf_counter() - began


def time_relay(topic: str, ids: list[int], batch_size: int | None) -> tuple[float, int, int]:
    """drain() until every event of `ids` is published: seconds, events published, batch failures."""
    from outbox.models import OutboxEvent
    from outbox.relay import OutboxRelay

    # By range, not id__in: binding 50,000 ids took about a second per check, inside the timing
    # (bulk_create gives one run of ids; another process's event in the range is published too).
    left = OutboxEvent.objects.filter(id__range=(min(ids), max(ids)), published_at__isnull=True)
    relay = OutboxRelay(topic=topic, batch_size=batch_size)
    warm_up(relay._producer(), topic)  # as in relay_outbox, which keeps its producer
    published = failures = 0
    began, deadline = time.perf_counter(), time.monotonic() + 600
    while True:
        published += relay.drain()
        failures += bool(relay.failures_in_a_row)
        if not left.exists():
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the relay did not publish the bench events within 600 s ({published} published)")
        time.sleep(max(0.0, relay.retry_at - time.monotonic()))
    seconds = time.perf_counter() - began
    relay._close()
    return seconds, published, failures


def time_producer(topic: str, messages: list, *, each: bool = False, encode: bool = False) -> tuple[float, int]:
    """A producer from new_producer(), connected beforehand, no database: the ceiling (one flush at the
    end; `encode`: OutboxEvents encoded here) or, with `each`, a send-and-wait per message."""
    from outbox.relay import new_producer

    producer = new_producer()
    warm_up(producer, topic)
    began = time.perf_counter()
    errors = h.produce(topic, (envelope(m) for m in messages) if encode else messages, producer, each=each)
    return time.perf_counter() - began, errors


def time_case_study(topic: str, count: int) -> tuple[float, int]:
    """The floor, the case study's relay (section 6.3), back to back: a transaction reads the next 100
    unpublished events FOR UPDATE SKIP LOCKED; each is sent and waited for, then marked on its own."""
    from outbox.relay import mark_published, new_producer

    producer = new_producer()
    warm_up(producer, topic)
    published, began, rows = 0, time.perf_counter(), True
    while rows:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT e.id, e.aggregate_id, e.payload::text FROM outbox_pending AS p JOIN outbox_events "
                           "AS e ON e.id = p.id ORDER BY p.id LIMIT 100 FOR UPDATE OF e SKIP LOCKED")  # fmt: skip
            rows = cursor.fetchall()
            for event_id, key, payload in rows:
                producer.produce(topic, payload.encode(), key.encode())
                if producer.flush(30):
                    raise RuntimeError("case study: a message was not delivered within 30 s")
                mark_published([event_id])
        published += len(rows)
    if published < count:
        raise RuntimeError(f"case study: {published} of {count} events published")
    return time.perf_counter() - began, published


def vacuum_outbox(lock) -> str:
    """VACUUM (ANALYZE) outbox_events and its queue, as autovacuum would (on the lock's autocommit connection)."""
    live, dead = lock.execute("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events'"
                              ).fetchone()  # fmt: skip
    autovacuum, began = lock.execute("SHOW autovacuum").fetchone()[0], time.perf_counter()
    lock.execute("VACUUM (ANALYZE) outbox_events")
    lock.execute("VACUUM (ANALYZE) outbox_pending")
    return (f"VACUUM (ANALYZE) outbox_events and its queue before timing: {time.perf_counter() - began:.1f} s "
            f"(it had ~{live:,} live / ~{dead:,} dead tuples; autovacuum={autovacuum})")  # fmt: skip


def part1(args, topic: str, original_topic: str, lock) -> dict:
    from outbox.models import OutboxEvent
    from outbox.relay import OutboxRelay, new_producer

    print(f"part 1: throughput, topic {topic}, {args.rounds} round(s) (median reported)")
    unpublished = OutboxEvent.objects.filter(published_at__isnull=True)
    if foreign := unpublished.count():
        print(f"  {foreign} unpublished event(s) already in the development outbox: publishing them first "
              f"to {original_topic} with the relay")  # fmt: skip
        relay = OutboxRelay(topic=original_topic)  # one drain: the bench does not wait for other writers
        print(f"  published {relay.drain()}; {unpublished.count()} still unpublished")
        relay._close()
    startup_s = warm_up(new_producer(), topic)
    runs: list[dict] = []
    for round_no in range(1, args.rounds + 1):
        began = time.perf_counter()
        events = insert_events(args.events, args.aggregates)
        inserted_s = time.perf_counter() - began
        vacuum = "" if args.no_vacuum else vacuum_outbox(lock)
        began = time.perf_counter()
        messages = [envelope(e) for e in events]
        encode_s = time.perf_counter() - began
        if round_no == 1:
            print(f"  inserted {len(events):,} events ({args.aggregates:,} aggregate_ids) in {inserted_s:.1f} s "
                  "(bulk_create, untimed)" + (f"\n  {vacuum}" if vacuum else ""))  # fmt: skip
            print(f"  envelope: {statistics.mean(len(v) for _, v, _ in messages):.0f} bytes on average; envelope() "
                  f"of all {len(events):,} took {encode_s:.2f} s ({encode_s / len(events) * 1e6:.0f} us each)")
        relay_s, relay_published, failures = time_relay(topic, [e.id for e in events], args.batch_size)
        bare_s, bare_errors = time_producer(topic, messages)
        inline_s, _ = time_producer(topic, events, encode=True)
        alone_s, alone_errors = time_producer(topic, messages[: args.floor_events], each=True)
        OutboxEvent.objects.filter(id__in=[e.id for e in events]).delete()
        floor_ids = [e.id for e in insert_events(args.floor_events, args.floor_events, AGGREGATE_BASE + 40_000_000)]
        floor_s, floor_published = time_case_study(topic, args.floor_events)
        OutboxEvent.objects.filter(id__in=floor_ids).delete()
        runs.append(run := {
            "relay": args.events / relay_s, "bare": args.events / bare_s, "inline": args.events / inline_s,
            "floor": floor_published / floor_s, "floor_ms": floor_s / floor_published * 1000,
            "alone": args.floor_events / alone_s, "alone_ms": alone_s / args.floor_events * 1000,
            "failures": failures, "extra": relay_published - args.events, "errors": bare_errors + alone_errors,
        })  # fmt: skip
        print(f"  round {round_no}: relay {run['relay']:,.0f}/s, producer encoding the envelopes "
              f"{run['inline']:,.0f}/s (= {run['relay'] / run['inline']:.2f}), pre-encoded {run['bare']:,.0f}/s, "
              f"floor {run['floor']:,.0f}/s, send-and-wait alone {run['alone']:,.0f}/s")  # fmt: skip

    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    extra = sum(max(0, r["extra"]) for r in runs)
    rows = [("relay: OutboxRelay().drain()", args.events, "relay", f"batch {args.batch_size or 'default'}, "
             f"{sum(r['failures'] for r in runs)} failed batch(es)"
             + (f", +{extra // len(runs):,} others' events/round" if extra else "")),
            ("(a) bare producer, 1 flush", args.events, "bare", "info: pre-encoded envelopes, new_producer() config"),
            ("    same, envelope() encoded inline", args.events, "inline",
             "the goal's producer: the JSON encoding the relay also does"),
            ("(b) floor: the case study's relay", args.floor_events, "floor",
             f"{med['floor_ms']:.2f} ms per event: send-and-wait + UPDATE"),
            ("    send-and-wait alone, no database", args.floor_events, "alone",
             f"info: {med['alone_ms']:.2f} ms per produce + flush")]  # fmt: skip
    print()
    h.print_table(["approach", "events", "events/s (median)", "range", "note"], [
        [label, f"{n:,}", f"{med[key]:,.0f}", f"{min(r[key] for r in runs):,.0f}..{max(r[key] for r in runs):,.0f}"
         if len(runs) > 1 else "", note] for label, n, key, note in rows])  # fmt: skip
    ratio_encoding, ratio_floor = med["relay"] / med["inline"], med["relay"] / med["floor"]
    ok_c, ok_f = ratio_encoding >= GOALS["encoding"], ratio_floor >= GOALS["floor"]
    print(f"\n  relay / producer encoding the envelopes = {ratio_encoding:.2f}  (goal >= {GOALS['encoding']})  "
          f"{h.verdict(ok_c, 'OK')}\n  relay / floor = {ratio_floor:.1f}x  (goal >= {GOALS['floor']:.0f}x)  "
          f"{h.verdict(ok_f, 'OK')}")  # fmt: skip
    print(f"  (relay / pre-encoded producer = {med['relay'] / med['bare']:.2f}; pre-encoded / floor = "
          f"{med['bare'] / med['floor']:.1f}x: the most any relay could reach against this broker; "
          f"relay / send-and-wait alone = {med['relay'] / med['alone']:.1f}x)")  # fmt: skip
    print(f"  every producer above was connected before its timing began (a first delivery: {startup_s:.2f} s, "
          "once per process)")  # fmt: skip
    if extra:
        print(f"  note: the relay also published {extra} event(s) that other processes wrote meanwhile")
    if errors := sum(r["errors"] for r in runs):
        print(f"  note: {errors} delivery error(s) in the ceiling/floor runs")
    return {"ok": ok_c and ok_f, "ceiling": med["inline"]}


def timed(function, times: dict[str, list[float]], phase):
    """`function`, each call's wall time appended to times[phase] (or to times[phase(*args)])."""

    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            times.setdefault(phase(*args) if callable(phase) else phase, []).append(time.perf_counter() - began)

    return wrapper


class Timed:
    """A proxy of a confluent-kafka client (no attribute can be set on one), the methods in `phases` timed."""

    def __init__(self, inner, times: dict[str, list[float]], phases: dict) -> None:
        self._inner, self._times, self._phases = inner, times, phases

    def __getattr__(self, name):
        method = getattr(self._inner, name)
        return timed(method, self._times, self._phases[name]) if name in self._phases else method


PRODUCER_PHASES = {"produce": "Kafka produce() + poll(0)", "flush": "Kafka flush() (waiting for the acks)",
                   "poll": lambda timeout=None: "Kafka produce() + poll(0)" if timeout == 0
                   else "Kafka poll(t) (waiting for the acks)"}  # fmt: skip


def drain_once(topic, count, args, lock, *, marking=True, profiler=None):
    """One drain() of `count` fresh events, its phases timed (without `marking`: nothing is marked, one
    run reads them all). Returns events published, seconds, events left, times by phase."""
    from outbox.models import OutboxEvent
    from outbox.relay import OutboxRelay, new_producer, sql, threads

    ids = [e.id for e in insert_events(count, min(args.aggregates, count), AGGREGATE_BASE + 50_000_000)]
    vacuum_outbox(lock)
    times: dict[str, list[float]] = {}
    relay = OutboxRelay(topic=topic, batch_size=args.batch_size,
                        producer_factory=lambda: Timed(new_producer(), times, PRODUCER_PHASES))  # fmt: skip
    warm_up(relay._producer(), topic)
    times.clear()

    def sql_timing(execute, sql, params, many, context):
        phase = "SQL leader lock and unlock" if "advisory" in sql else "SQL other (main thread)"
        return timed(execute, times, phase)(sql, params, many, context)

    wrapper = connections["default"]  # this thread's: atomic() commits through its _commit()
    with contextlib.ExitStack() as stack:
        for target, name, function, phase in [
            (sql, "read_pending", sql.read_pending, "reads"),
            (sql, "mark_published", sql.mark_published if marking else lambda ids: None, "marks"),
            (threads.ReadAhead, "take", threads.ReadAhead.take, "waiting for a read-ahead batch"),
            (wrapper, "_commit", wrapper._commit, "SQL COMMIT"),
        ]:  # fmt: skip
            stack.enter_context(mock.patch.object(target, name, timed(function, times, phase)))
        stack.enter_context(connection.execute_wrapper(sql_timing))
        stack.enter_context(profiler or contextlib.nullcontext())
        began = time.perf_counter()
        published = relay.drain() if marking else relay.publish(max_batches=count // relay.batch_size + 1).published
        seconds = time.perf_counter() - began
    relay._close()
    left = OutboxEvent.objects.filter(id__in=ids, published_at__isnull=True).count()
    OutboxEvent.objects.filter(id__in=ids).delete()
    return published, seconds, left, times


def phase_split(topic: str, args, lock, ceiling: float | None) -> None:
    """Where drain() spends its time; a bound (marking switched off); the same drain() under cProfile."""
    published, seconds, left, times = drain_once(topic, args.profile_events, args, lock)
    reads, marks = times.pop("reads", []), times.pop("marks", [])
    batches = max(1, len(reads))
    print(f"\nwhere drain() spends its time: {published:,} events in {seconds:.2f} s = {published / seconds:,.0f} "
          f"events/s, {batches} batches ({left} left unpublished), no profiler")  # fmt: skip

    def row(phase: str, spent: float, per: int, share: str) -> list[str]:
        return [phase, f"{spent:.3f}", f"{spent / max(per, 1) * 1000:.1f}", f"{spent / max(published, 1) * 1e6:.1f}",
                share]  # fmt: skip

    spent = sorted(((phase, sum(v)) for phase, v in times.items()), key=lambda kv: -kv[1])
    rows = [row(phase, total, batches, f"{total / seconds:.0%}") for phase, total in spent]
    rest = seconds - sum(total for _, total in spent) - (reads[0] if reads else 0.0)
    if reads:
        rows.append(row("the run's first read (SQL + rows to messages)", reads[0], 1, f"{reads[0] / seconds:.0%}"))
    rows.append(row("Python: closures, delivery callbacks, the rest", rest, batches, f"{rest / seconds:.0%}"))
    for label, v in (("reads (SQL + rows to messages)", reads), ("marking UPDATEs", marks)):
        rows.append(row(f"overlapped: {len(v)} {label}, all threads", sum(v), len(v), f"({sum(v) / seconds:.0%})"))
    h.print_table(["phase", "seconds", "ms/batch", "us/event", "share"], rows)
    if len(reads) >= 10:
        tenth = len(reads) // 10
        print(f"  reads: first tenth {sum(reads[:tenth]) / tenth * 1000:.1f} ms each, "
              f"last tenth {sum(reads[-tenth:]) / tenth * 1000:.1f} ms each")  # fmt: skip
    bounds = [(lambda r: r[0] / r[1])(drain_once(topic, args.events, args, lock, marking=False))
              for _ in range(args.rounds)]  # fmt: skip
    bound = statistics.median(bounds)
    print(f"bound: marking switched off, {args.events:,} events, median of {args.rounds}: {bound:,.0f} events/s"
          + (f" = {bound / ceiling:.2f} of the producer encoding the envelopes" if ceiling else "")
          + f" (rounds {h.each(bounds, ',.0f', ', ')})")  # fmt: skip
    profiler = cProfile.Profile()
    published, seconds, *_ = drain_once(topic, args.profile_events, args, lock, profiler=profiler)
    print(f"\ncProfile of drain(): {published:,} events in {seconds:.2f} s ({published / seconds:,.0f} events/s with "
          "the profiler's overhead); top functions by own time:")  # fmt: skip
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(16)
    lines = out.getvalue().splitlines()
    for line in lines[next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0) :]:
        if line.strip():
            print("  " + line.replace(f"{h.ROOT}/", "").replace(f"{sys.prefix}/lib/python3.11/site-packages/", ""))


def consumer_child(name: str) -> int:
    """Part 2's consumer: an EventConsumer whose OrderCreated handler's effect is a timestamp taken on
    commit; prints "E order produced_ms received effect done" per event, DONE at the end. Other
    customers' events (BENCH_RL_CUSTOMERS) are skipped unless BENCH_RL_ALL=1."""
    h.setup()
    from outbox.consumers import EventConsumer, register
    from outbox.shutdown import stop_on_sigterm

    state: dict = {}

    @register(name, "OrderCreated")
    def on_order_created(event):
        state["order"] = int(event.data["order_id"])
        transaction.on_commit(lambda: state.__setitem__("effect", time.time()))

    customers = {int(x) for x in Path(os.environ["BENCH_RL_CUSTOMERS"]).read_text().split()}
    skipped, spent = [0], {"commit": []}

    class TimedConsumer(EventConsumer):
        def apply(self, message):
            received = time.time()
            if os.environ.get("BENCH_RL_ALL") != "1":
                with contextlib.suppress(Exception):
                    if json.loads(message.value())["data"].get("customer_id") not in customers:
                        skipped[0] += 1
                        return True
            state.clear()
            applied = super().apply(message)
            if "order" in state:  # CreateTime: set by the relay's producer at produce()
                print(f"E {state['order']} {message.timestamp()[1]} {received:.6f} {state.get('effect', 0.0):.6f} "
                      f"{time.time():.6f}", flush=True)  # fmt: skip
            return applied

    stop = stop_on_sigterm()
    consumer = TimedConsumer(name=name)
    consumer.consumer = Timed(consumer.consumer, spent, {"commit": "commit"})  # its offset commits
    print("READY", flush=True)
    consumer.run(should_stop=stop.is_set)
    commits = spent["commit"]
    print(f"DONE processed={consumer.processed} duplicates={consumer.duplicates} dead={consumer.dead_lettered} "
          f"skipped_foreign={skipped[0]} offset_commits={len(commits)} "
          f"ms_per_offset_commit={sum(commits) / max(len(commits), 1) * 1000:.1f}", flush=True)  # fmt: skip
    return 0


LAGS = {  # part 2's lags, from (produced, received, effect, done) of an order's event and its commit time
    "commit -> produced by relay_outbox (CreateTime)": lambda s, c: s[0] - c,
    "commit -> the consumer starts applying it": lambda s, c: s[1] - c,
    "  of which produced -> applying (broker, fetch, batch)": lambda s, c: s[1] - s[0],
    "commit -> consumer's effect committed": lambda s, c: s[2] - c,
    "consumer apply() (its transaction, retries)": lambda s, c: s[3] - s[1],
}


def part2(args, topic: str, run_id: str) -> dict:
    from orders.services import place_order
    from outbox.models import OutboxEvent

    total, warmup = math.ceil(args.rate * args.seconds), 20
    print(f"part 2: lag at {args.rate:g} orders/s for {args.seconds:g} s ({total:,} orders, {args.threads} threads), "
          f"topic {topic}")  # fmt: skip
    began = time.perf_counter()
    skus = [f"{PREFIX}{i:04d}" for i in range(1, args.skus + 1)]
    h.ensure_products(skus, 1_000_000)
    shoppers = h.ensure_users(total + warmup, prefix=PREFIX)
    h.fill_carts([(cid, {skus[i % len(skus)]: 1}) for i, cid in enumerate(shoppers)])
    print(f"  {len(skus)} products, {len(shoppers):,} shoppers and their one-line carts ready in "
          f"{time.perf_counter() - began:.1f} s")  # fmt: skip
    last = OutboxEvent.objects.aggregate(m=Max("id"))["m"] or 0
    time.sleep(1.0)
    if others := OutboxEvent.objects.filter(id__gt=last).count():
        print(f"  warning: other processes write ~{others} outbox events/s to the development database right now;"
              " relay_outbox publishes them to the bench topic too")  # fmt: skip

    consumer_name = f"bench_lag_{run_id}"
    with tempfile.NamedTemporaryFile("w", prefix="bench-relay-customers-", suffix=".txt", delete=False) as file:
        file.write("\n".join(map(str, shoppers)))
    env = {"KAFKA_ORDERS_TOPIC": topic, "KAFKA_CONSUMER_GROUP_PREFIX": settings.KAFKA_CONSUMER_GROUP_PREFIX,
           "BENCH_RL_CUSTOMERS": file.name, "BENCH_RL_ALL": "1" if args.consumer_all else "0"}  # fmt: skip
    python = str(h.VENV_BIN / "python")
    relay = h.Child("relay", [python, "manage.py", "relay_outbox"], env).start()
    consumer = h.Child("consumer", [python, "-m", "bench.relay", "--consumer-child", consumer_name], env,
                       pipe_stdout=True).start()  # fmt: skip
    seen: dict[int, tuple[float, float, float, float]] = {}  # order id -> produced, received, effect, done
    consumer_lines: list[str] = []

    def read_consumer():
        for line in consumer.proc.stdout:
            if line.startswith("E "):
                _, order, produced_ms, *times = line.split()
                seen[int(order)] = (int(produced_ms) / 1000, *map(float, times))
            else:
                consumer_lines.append(line.strip())

    reader = threading.Thread(target=read_consumer, daemon=True)
    reader.start()
    results: dict = {"ok": False, "consumer_name": consumer_name}
    try:
        began = time.perf_counter()
        warm_ids = [place_order(customer_id=shoppers[total + i], idempotency_key=f"bench-rl-{run_id}-w{i}").order.id
                    for i in range(warmup)]  # fmt: skip
        h.wait_until(lambda: all(o in seen for o in warm_ids), 90, "warm-up orders did not reach the consumer",
                     relay, consumer, every=0.05)  # fmt: skip
        print(f"  warm-up: {warmup} orders through relay_outbox and the consumer in "
              f"{time.perf_counter() - began:.1f} s")  # fmt: skip

        commit_at: dict[int, float] = {}  # order id -> wall clock right after place_order returned
        tickets, late, errors = itertools.count(), [], []
        start = time.perf_counter() + 0.2

        def cpu() -> dict[str, float]:
            return {"relay": relay.cpu_seconds(), "consumer": consumer.cpu_seconds(),
                    "bench (place_order)": h.process_cpu_seconds(os.getpid())}  # fmt: skip

        cpu_before, busy_before = cpu(), h.cpu_times()

        def shopper_thread():
            try:
                while (i := next(tickets)) < total:  # open loop: order i is due at start + i / rate
                    if (delay := start + i / args.rate - time.perf_counter()) > 0:
                        time.sleep(delay)
                    else:
                        late.append(-delay)
                    try:
                        placed = place_order(customer_id=shoppers[i], idempotency_key=f"bench-rl-{run_id}-{i}")
                        commit_at[placed.order.id] = time.time()
                    except Exception as exc:  # noqa: BLE001 - reported, not fatal
                        errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                connection.close()

        workers = [threading.Thread(target=shopper_thread) for _ in range(args.threads)]
        t0_wall = time.time() + (start - time.perf_counter())
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        load_s = max(commit_at.values(), default=t0_wall) - t0_wall
        deadline = time.monotonic() + 30
        while any(o not in seen for o in commit_at) and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu_after, machine = cpu(), h.cpu_times(since=busy_before)
        wall = max([v[3] for o, v in seen.items() if o in commit_at] + [time.time()]) - t0_wall
        alive = {child.name: child.alive() for child in (relay, consumer)}

        mine = [o for o in commit_at if o in seen]
        lags = {name: [f(seen[o], commit_at[o]) * 1000 for o in mine] for name, f in LAGS.items()}
        missing, achieved = len(commit_at) - len(mine), len(commit_at) / max(load_s, 1e-9)
        print(f"  placed {len(commit_at):,} orders in {load_s:.1f} s = {achieved:.0f} orders/s ({len(errors)} errors;"
              f" {sum(x > 0.05 for x in late)} started > 50 ms behind schedule, at most "
              f"{max(late, default=0) * 1000:.0f} ms)" + (f"\n  first error: {errors[0]}" if errors else "") + "\n")
        h.print_table(["lag (ms)", "orders", "p50", "p90", "p99", "max"], [
            [name, f"{len(v):,}", *(f"{h.pct(v, p):.0f}" for p in (50, 90, 99)), f"{max(v, default=0):.0f}"]
            for name, v in lags.items()])  # fmt: skip
        windows: dict[int, list[float]] = {}  # does the lag stay flat or grow (a stage that cannot keep up)?
        for o in mine:
            windows.setdefault(int((commit_at[o] - t0_wall) // 5), []).append((seen[o][2] - commit_at[o]) * 1000)
        print("  effect lag by 5 s window of commit time (p50/p99 ms): " + ", ".join(
            f"{w * 5}-{w * 5 + 5}s {h.pct(v, 50):.0f}/{h.pct(v, 99):.0f}" for w, v in sorted(windows.items())))
        if mine:
            span = max(seen[o][3] for o in mine) - min(seen[o][1] for o in mine)
            print(f"  consumer: {len(mine):,} events applied in {span:.1f} s = {len(mine) / max(span, 1e-9):.0f} "
                  f"events/s (the input was {achieved:.0f}/s; lower means it could not keep up)")  # fmt: skip
        used = ", ".join(f"{k} {v - cpu_before[k]:.1f}" for k, v in cpu_after.items())
        print(f"  CPU seconds over {wall:.1f} s: {used}; machine {machine:.0%} busy ({os.cpu_count()} CPUs)")
        p99 = h.pct(lags["commit -> consumer's effect committed"], 99) if mine else float("inf")
        results["ok"] = p99 < GOALS["p99_ms"] and missing == 0 and not errors
        print(f"\n  p99 lag (commit -> effect) = {p99:.0f} ms  (goal < {GOALS['p99_ms']:.0f} ms)  "
              f"{h.verdict(results['ok'], 'OK')}"
              + (f"; {missing} order(s) did not reach the consumer within 30 s" if missing else ""))  # fmt: skip
        for name in (name for name, up in alive.items() if not up):
            print(f"  {name} died during the run")
        if foreign := len(set(seen) - set(commit_at) - set(warm_ids)):
            print(f"  note: the consumer also applied {foreign} OrderCreated event(s) other processes wrote meanwhile")
    finally:
        codes = {child.name: child.stop() for child in (relay, consumer)}
        os.unlink(file.name)
        reader.join(5)
        done = next((line for line in consumer_lines if line.startswith("DONE")), "")
        print(f"  stopped: relay_outbox exit {codes['relay']}, consumer exit {codes['consumer']} {done}".rstrip())
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.consumer_child:
        return consumer_child(args.consumer_child)
    h.setup()
    from outbox.topics import ensure_topics

    run_id = time.strftime("%Y%m%d%H%M%S") + f"{os.getpid() % 1000:03d}"
    topic, lag_topic = f"bench.relay.{run_id}", f"bench.relay.{run_id}.lag"
    original_topic, settings.KAFKA_ORDERS_TOPIC = settings.KAFKA_ORDERS_TOPIC, topic
    settings.KAFKA_CONSUMER_GROUP_PREFIX = f"bench.relay.{run_id}."
    lock = h.lock_or_exit(LOCK_KEY, "relay")
    print(f"python -m bench.relay: {os.cpu_count()} CPU(s), broker {settings.KAFKA_BOOTSTRAP_SERVERS}, "
          f"batch size {args.batch_size or settings.OUTBOX_BATCH_SIZE}, DEBUG={settings.DEBUG}")  # fmt: skip
    h.warn_if_busy()
    h.leftovers(cleanup())
    topics = [topic, lag_topic, f"{lag_topic}.dlq"]
    ensure_topics(topics=topics)
    results: dict[str, dict] = {}
    try:
        if not args.skip_throughput:
            results["throughput"] = part1(args, topic, original_topic, lock)
            if args.profile or not results["throughput"]["ok"]:
                phase_split(topic, args, lock, results["throughput"]["ceiling"])
            print()
        if not args.skip_lag:
            results["lag"] = part2(args, lag_topic, run_id)
    finally:
        done = cleanup([r["consumer_name"] for r in results.values() if "consumer_name" in r])
        print(f"\ncleanup: {done}; topics {', '.join(topics)} {h.delete_topics(topics)}")
        lock.close()
    if not results:
        print("nothing measured (--skip-throughput and --skip-lag): clean-up only")
        return 0
    ok = all(r["ok"] for r in results.values())
    print("all goals met" if ok else "goal(s) missed: " + ", ".join(k for k, r in results.items() if not r["ok"]))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
