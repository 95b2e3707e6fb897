"""Outbox relay throughput and commit-to-consumer lag (issue 6, "What it must show").

    .venv/bin/python bench/relay.py                                  # 50,000 events; 200 orders/s for 20 s
    .venv/bin/python bench/relay.py --events 50000 --rate 200 --seconds 20 [--profile]

Part 1, throughput. 50,000 outbox events (OrderCreated-like payloads with 2 items, ~10,000
distinct aggregate_ids) are bulk-inserted into the development database (untimed; outbox_events is
then VACUUM ANALYZEd, as autovacuum would, unless --no-vacuum), then timed, each with a producer
that was connected before its timing began (one message delivered: a new idempotent producer takes
about 0.5 s to its first acknowledgement, once per process; printed):
  relay    `OutboxRelay().drain()` until all of them are published (events/s);
  ceiling  the same 50,000 envelopes (pre-encoded) produced by a bare confluent-kafka Producer
           built by outbox.relay.new_producer() (same config), no database, one flush at the end
           (and, for information, the same with envelope() encoding inline);
  floor    the case study's relay (section 6.3) on --floor-events fresh events: in a transaction,
           the next 100 unpublished events FOR UPDATE SKIP LOCKED, then for each a synchronous
           send-and-wait (produce + flush) and an UPDATE of its own; back to back, without the
           case study's 500 ms pause between runs (and, for information, the send-and-wait alone,
           no database, over --floor-events of the envelopes).
--rounds rounds (fresh events each), medians reported; then relay/ceiling (goal >= 0.5) and
relay/floor (goal >= 20). When a goal is missed (or with --profile): where drain() spends its time,
phase by phase without a profiler (waiting for reads, Kafka calls, COMMIT, the Python rest; the
read-ahead and marking threads' time beside it) and the top functions of a cProfile'd drain(), each
on --profile-events fresh events; and a bound: --events relayed with marking switched off, median
of --rounds.

Part 2, lag. `manage.py relay_outbox` runs as a subprocess, and so does the consumer: a real
outbox.consumers.EventConsumer (`bench/relay.py --consumer-child NAME`, group <bench prefix>NAME)
with a handler registered for OrderCreated whose effect is a timestamp taken when its transaction
commits. --threads threads of this process call place_order at a steady --rate orders/s for
--seconds s (open loop: order i is due at t0 + i/rate), one-line carts of BENCH-RL-#### products
filled in Redis beforehand, one shopper BENCH-RL-##### per order; the commit time is read right
after place_order returns. Printed, p50/p90/p99/max in ms: commit -> produced (the message's
CreateTime, set by relay_outbox's producer), commit -> received by the consumer, commit -> the
consumer's effect committed (the goal: p99 < 1 s), and the consumer's apply() time ("received" is
when the consumer starts applying the message: a batch's later messages wait for the earlier); the
consumer's offset commits (one per batch) on its last line; the lag per
5 s window (does it grow?) and the CPU used. Events other processes write to the development outbox
meanwhile are relayed too; the consumer skips them (unless --consumer-all) and they are reported.

Every run uses fresh topics bench.relay.<timestamp> (part 1) and bench.relay.<timestamp>.lag
(part 2), and consumer groups bench.relay.<timestamp>.*; settings are overridden in this process and
passed to the relay subprocess as KAFKA_ORDERS_TOPIC / KAFKA_CONSUMER_GROUP_PREFIX. DEBUG is off
(production-like, secrets made for the run, this process and the subprocess only).

Side effects on the development database: the relay publishes every unpublished outbox event, not
only the bench's. Unpublished events found at the start are first published by the relay to the
normal topic (settings.KAFKA_ORDERS_TOPIC) and reported. At the end (and at the start, after a run
that was killed) the bench deletes its outbox events, the BENCH-RL- shoppers' orders, items, outbox
events and carts, gives the stock those orders reserved back, deletes the bench consumer's
processed_events rows and (best effort) the bench topics. Products and shoppers stay for the next run.

"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import itertools
import json
import math
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
import _harness  # noqa: E402  (bench/_harness.py: setup_django, ensure_products, helpers)

PREFIX = "BENCH-RL-"
BENCH_MARK = "relay"  # payload["bench"] of the part-1 events: how a killed run's leftovers are found
AGGREGATE_BASE = 9_100_000_000  # fake order ids of the part-1 events (aggregate_id only, no FK)
FLOOR_BASE = AGGREGATE_BASE + 40_000_000  # those of the floor's events
LOCK_KEY = 0x42_52_4C_01  # pg advisory lock: one relay bench at a time on a database
GOALS = {"ceiling": 0.5, "floor": 20.0, "p99_ms": 1000.0}
PRODUCTION_LIKE_ENV = _harness.PRODUCTION_LIKE_ENV



def envelope(event) -> bytes:
    """The relay's message value, encoded in Python (the relay itself has PostgreSQL write it)."""
    return json.dumps(
        {
            "event_id": str(event.event_id),
            "event_type": event.event_type,
            "occurred_at": event.created_at.isoformat(),
            "aggregate_type": event.aggregate_type,
            "aggregate_id": event.aggregate_id,
            "data": event.payload,
        },
        separators=(",", ":"),
    ).encode()

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=50_000, help="outbox events of part 1 (default 50000)")
    p.add_argument("--aggregates", type=int, default=10_000, help="distinct aggregate_ids (default 10000)")
    p.add_argument("--floor-events", type=int, default=2_000, help="events sent one by one (default 2000)")
    p.add_argument("--rounds", type=int, default=3, help="part-1 rounds, median reported (default 3)")
    p.add_argument("--batch-size", type=int, default=None, help="relay batch size (default: settings)")
    p.add_argument("--rate", type=float, default=200.0, help="orders/s of part 2 (default 200)")
    p.add_argument("--seconds", type=float, default=20.0, help="duration of part 2 (default 20)")
    p.add_argument("--threads", type=int, default=8, help="place_order threads of part 2 (default 8)")
    p.add_argument("--skus", type=int, default=20, help="products of part 2 (default 20)")
    p.add_argument(
        "--no-vacuum",
        action="store_true",
        help="do not VACUUM ANALYZE outbox_events after inserting the events (before timing)",
    )
    p.add_argument(
        "--consumer-all",
        action="store_true",
        help="the lag consumer also applies events other processes write meanwhile (default: skips them)",
    )
    p.add_argument("--skip-throughput", action="store_true", help="part 2 only")
    p.add_argument("--skip-lag", action="store_true", help="part 1 only")
    p.add_argument("--profile", action="store_true", help="always profile a drain() (cProfile)")
    p.add_argument("--profile-events", type=int, default=10_000, help="events of the profiled drain")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    p.add_argument("--consumer-child", metavar="NAME", help=argparse.SUPPRESS)  # part 2's consumer process
    args = p.parse_args(argv)
    if (
        args.events < 1
        or args.rounds < 1
        or args.threads < 1
        or args.aggregates < 1
        or args.floor_events < 1
        or args.rate <= 0
        or args.seconds <= 0
    ):
        p.error("counts, --rate and --seconds must be positive")
    args.floor_events = min(args.floor_events, args.events)
    return args


def setup_django() -> None:
    _harness.setup_django(production_like=True)


# --- Small helpers ------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    return _harness._percentile(sorted(values), p)


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


class BenchLock:
    """A session advisory lock on a connection of its own: one relay bench at a time."""

    def __init__(self) -> None:
        import psycopg
        from django.db import connection

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self.conn = psycopg.connect(**params, autocommit=True)

    def acquire(self) -> bool:
        return self.conn.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY]).fetchone()[0]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()  # the session lock goes with the session


def other_relays() -> list[str]:
    """Processes that may relay the development outbox to another topic meanwhile."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "relay_outbox" in cmd or ("celery" in cmd and " beat" in cmd):
                found.append(f"{proc.name}: {cmd.strip()[:100]}")
    return found


# --- Cleanup ------------------------------------------------------------------------------------


def cleanup(consumer_names: list[str] = ()) -> dict[str, int]:
    """Delete the bench's outbox events (part 1) and what BENCH-RL- shoppers' checkouts left
    (orders, items, outbox events, carts), giving back the stock their open orders reserved; and
    the processed_events rows of the bench consumers. Idempotent.

    Every statement goes through an index (ids first, then `= ANY(ids)`): the development
    database may be bloated (autovacuum off, other benches), where a join with LIKE in a
    subquery takes minutes."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django_redis import get_redis_connection

    from cart.storage import cart_key
    from inventory.models import Stock
    from orders.models import Order, OrderItem, OrderStatus
    from outbox.models import OutboxEvent, ProcessedEvent

    orders, items = Order._meta.db_table, OrderItem._meta.db_table
    outbox, stock = OutboxEvent._meta.db_table, Stock._meta.db_table
    holding = [str(OrderStatus.PENDING_PAYMENT), str(OrderStatus.PAID)]  # a cancelled order gave it back
    customer_ids = list(get_user_model().objects.filter(username__startswith=PREFIX).values_list("id", flat=True))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {outbox} WHERE aggregate_type = 'order' AND aggregate_id BETWEEN %s AND %s"
            " AND payload->>'bench' = %s",
            [str(AGGREGATE_BASE), str(AGGREGATE_BASE + 59_999_999), BENCH_MARK],
        )
        synthetic = cursor.rowcount
        order_ids = list(Order.objects.filter(customer_id__in=customer_ids).values_list("id", flat=True))
        restored = order_events = deleted = 0
        if order_ids:
            cursor.execute(
                f"""
                UPDATE {stock} AS s SET available = s.available + r.q, reserved = s.reserved - r.q
                FROM (SELECT i.sku, SUM(i.quantity) AS q FROM {items} i JOIN {orders} o ON o.id = i.order_id
                      WHERE i.order_id = ANY(%s) AND o.status = ANY(%s) GROUP BY i.sku) AS r
                WHERE s.sku = r.sku
                """,
                [order_ids, holding],
            )
            restored = cursor.rowcount
            cursor.execute(
                f"DELETE FROM {outbox} WHERE aggregate_type = 'order' AND aggregate_id = ANY(%s)",
                [[str(i) for i in order_ids]],
            )
            order_events = cursor.rowcount
            cursor.execute(f"DELETE FROM {items} WHERE order_id = ANY(%s)", [order_ids])
            cursor.execute(f"DELETE FROM {orders} WHERE id = ANY(%s)", [order_ids])
            deleted = cursor.rowcount
            cursor.execute("DELETE FROM order_pending_counts WHERE customer_id = ANY(%s)", [customer_ids])
        names = [*consumer_names, *ProcessedEvent.objects.filter(consumer__startswith="bench_lag_")
                 .values_list("consumer", flat=True).distinct()]  # fmt: skip
        processed = ProcessedEvent.objects.filter(consumer__in=names).delete()[0] if names else 0
    redis = get_redis_connection("default")
    for start in range(0, len(customer_ids), 5000):
        keys = [cart_key(cid) for cid in customer_ids[start : start + 5000]]
        if keys:
            redis.delete(*keys)
    return {
        "synthetic_events": synthetic,
        "orders": deleted,
        "order_events": order_events,
        "skus_restored": restored,
        "processed_events": processed,
    }


def delete_topics(topics: list[str]) -> str:
    from config.kafka import admin_client

    admin = admin_client()  # kept alive until the futures are done
    try:
        futures = admin.delete_topics(topics, operation_timeout=10, request_timeout=10)
        for future in futures.values():
            future.result(timeout=10)
        return "deleted"
    except Exception as exc:  # the broker may not support it; the topics are the bench's own
        return f"not deleted ({type(exc).__name__}: {str(exc)[:120]})"


# --- Part 1: throughput -------------------------------------------------------------------------


def unpublished_count() -> int:
    from outbox.models import OutboxEvent

    return OutboxEvent.objects.filter(published_at__isnull=True).count()


def publish_foreign_events(topic: str) -> int:
    """Publish the unpublished events the development database holds, to its normal topic: one
    drain() (other processes may keep writing events; the bench does not wait for them)."""
    from outbox.relay import OutboxRelay

    relay = OutboxRelay(topic=topic)
    try:
        return relay.drain()
    finally:
        relay._close()


def insert_events(count: int, aggregates: int, *, aggregate_base: int = AGGREGATE_BASE):
    """`count` OrderCreated-like events, bulk-inserted; returns the created objects."""
    from django.db import transaction
    from django.utils import timezone

    from outbox.models import OutboxEvent

    now = timezone.now()
    expires = (now + timedelta(minutes=15)).isoformat()
    events = []
    for i in range(count):
        order_id = aggregate_base + i % aggregates
        events.append(
            OutboxEvent(
                aggregate_type="order",
                aggregate_id=str(order_id),
                event_type="OrderCreated",
                payload={
                    "order_id": order_id,
                    "customer_id": 100_000 + i % 5_000,
                    "items": [
                        {
                            "sku": f"{PREFIX}{1 + i % 20:04d}",
                            "name": f"Bench product {1 + i % 20}",
                            "quantity": 1 + i % 3,
                            "unit_price": 1001 + i % 20,
                        },
                        {
                            "sku": f"{PREFIX}{1 + (i + 7) % 20:04d}",
                            "name": f"Bench product {1 + (i + 7) % 20}",
                            "quantity": 1,
                            "unit_price": 1001 + (i + 7) % 20,
                        },
                    ],  # fmt: skip
                    "total": 3003 + i % 50,
                    "currency": "EUR",
                    "expires_at": expires,
                    "bench": BENCH_MARK,
                },
            )
        )
    with transaction.atomic():
        return OutboxEvent.objects.bulk_create(events, batch_size=5000)


def time_relay(topic: str, ids: list[int], batch_size: int | None) -> tuple[float, int, int]:
    """Time OutboxRelay().drain() until every event of `ids` is published. Returns seconds, events
    the relay published (the bench's and any other), and batch failures seen."""
    from outbox.models import OutboxEvent
    from outbox.relay import OutboxRelay

    lo, hi = min(ids), max(ids)
    ours_left = OutboxEvent.objects.filter(id__gte=lo, id__lte=hi, published_at__isnull=True, payload__bench=BENCH_MARK)
    relay = OutboxRelay(topic=topic, batch_size=batch_size)
    warm_up(relay._producer(), topic)  # as in relay_outbox, which keeps its producer
    published = failures = 0
    began = time.perf_counter()
    deadline = time.monotonic() + 600
    while True:
        published += relay.drain()
        if relay.failures_in_a_row:
            failures += 1
        if not ours_left.exists():
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the relay did not publish the bench events within 600 s ({published} published)")
        if time.monotonic() < relay.retry_at:
            time.sleep(relay.retry_at - time.monotonic())
    seconds = time.perf_counter() - began
    relay._close()
    return seconds, published, failures


def relay_headers(event) -> dict[str, str]:
    """The headers OutboxRelay sends with an event (request_id where the model has it)."""
    headers = {"event_id": str(event.event_id), "event_type": event.event_type}
    if hasattr(event, "request_id"):
        headers["request_id"] = event.request_id or ""
    return headers


def warm_up(producer, topic: str) -> float:
    """Have a new producer deliver one message, so that it is connected and has its idempotent
    producer id, as in a long-running process; returns the seconds that took (once per process)."""
    began = time.perf_counter()
    producer.produce(topic, b"warm-up", b"warm-up")
    if producer.flush(30):
        raise RuntimeError("the warm-up message was not delivered within 30 s")
    return time.perf_counter() - began


def time_bare(topic: str, messages: list, *, encode: bool = False) -> tuple[float, int]:
    """The ceiling: a producer from new_producer() (the relay's config), connected beforehand, no
    database, one flush at the end. `messages` are (key, value, headers) tuples, or OutboxEvents
    encoded here with envelope() when `encode`."""
    from outbox.relay import new_producer

    errors = [0]

    def on_delivery(error, message):
        if error is not None:
            errors[0] += 1

    producer = new_producer()
    warm_up(producer, topic)
    began = time.perf_counter()
    for item in messages:
        if encode:
            key, value, headers = item.aggregate_id.encode(), envelope(item), relay_headers(item)
        else:
            key, value, headers = item
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve deliveries and retry
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    seconds = time.perf_counter() - began
    if remaining:
        raise RuntimeError(f"bare producer: {remaining} message(s) not delivered within 60 s")
    return seconds, errors[0]


def time_send_and_wait(topic: str, messages: list[tuple[bytes, bytes, dict]]) -> tuple[float, int]:
    """For information: one synchronous send-and-wait (produce + flush) per event, and nothing else."""
    from outbox.relay import new_producer

    errors = [0]

    def on_delivery(error, message):
        if error is not None:
            errors[0] += 1

    producer = new_producer()
    warm_up(producer, topic)
    began = time.perf_counter()
    for key, value, headers in messages:
        producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
        if producer.flush(30):
            raise RuntimeError("send-and-wait: a message was not delivered within 30 s")
    seconds = time.perf_counter() - began
    return seconds, errors[0]


def time_case_study(topic: str, count: int) -> tuple[float, int]:
    """The floor: the case study's relay (section 6.3), on this schema. A transaction reads the next
    100 unpublished events FOR UPDATE SKIP LOCKED; each is sent and waited for (its .get()), then
    marked published by a statement of its own (here mark_published([id]), which also takes it off
    the queue). Runs back to back, without the case study's 500 ms fixedDelay between them. Publishes
    every unpublished event: the `count` the caller inserted, and any other process's."""
    from django.db import connection, transaction

    from outbox.models import OutboxEvent, UnpublishedEvent
    from outbox.relay import mark_published, new_producer

    select = f"""
        SELECT e.id, e.aggregate_id, e.payload::text
        FROM {UnpublishedEvent._meta.db_table} AS p JOIN {OutboxEvent._meta.db_table} AS e ON e.id = p.id
        ORDER BY p.id LIMIT 100 FOR UPDATE OF e SKIP LOCKED
    """
    producer = new_producer()
    warm_up(producer, topic)
    published = 0
    began = time.perf_counter()
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(select)
            rows = cursor.fetchall()
            for event_id, key, payload in rows:
                producer.produce(topic, payload.encode(), key.encode())
                if producer.flush(30):
                    raise RuntimeError("case study: a message was not delivered within 30 s")
                mark_published([event_id])
        published += len(rows)
        if not rows:
            break
    seconds = time.perf_counter() - began
    if published < count:
        raise RuntimeError(f"case study: {published} of {count} events published")
    return seconds, published


class TimedProducer:
    """A confluent-kafka Producer that adds up the wall time spent in produce(), poll() and flush()."""

    def __init__(self, inner, times: dict[str, float]) -> None:
        self._inner, self._times = inner, times

    def _timed(self, phase: str, method, *args, **kwargs):
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            self._times[phase] = self._times.get(phase, 0.0) + time.perf_counter() - began

    def produce(self, *args, **kwargs):
        return self._timed("Kafka produce() + poll(0)", self._inner.produce, *args, **kwargs)

    def poll(self, timeout=None, *args, **kwargs):
        phase = "Kafka produce() + poll(0)" if timeout == 0 else "Kafka poll(t) (waiting for the acks)"
        return self._timed(phase, self._inner.poll, timeout, *args, **kwargs)

    def flush(self, *args, **kwargs):
        return self._timed("Kafka flush() (waiting for the acks)", self._inner.flush, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def phase_split(
    topic: str, count: int, aggregates: int, batch_size: int | None, lock: BenchLock, ceiling: float | None,
    *, bound_events: int, bound_rounds: int,
) -> None:
    """Where drain() spends its time, without a profiler. On the relay's thread: waiting for a
    batch read, Kafka calls (a timing wrapper around the producer), COMMIT and the leader lock
    (execute_wrapper); the rest is Python (closures, delivery callbacks). Overlapped with it, in
    helper threads: the reads after a run's first (SQL, and rows made into messages) and the
    marking UPDATEs. Then a bound: the same events relayed with marking switched off (nothing is
    marked; one run reads them all), the most the relay could reach were marking free. Then the
    same drain() under cProfile."""
    from django.db import connection

    import outbox.relay
    from outbox.models import OutboxEvent
    from outbox.relay import OutboxRelay, new_producer

    times: dict[str, float] = {}
    reads: list[float] = []
    marks: list[float] = []

    def sql_kind(sql: str) -> str:
        return "SQL leader lock and unlock" if "advisory" in sql else "SQL other (main thread)"

    def timed(function, spent: list[float]):
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - began)

        return wrapper

    def timing(execute, sql, params, many, context):
        kind = sql_kind(sql)
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            times[kind] = times.get(kind, 0.0) + time.perf_counter() - began

    original = outbox.relay.read_pending, outbox.relay.mark_published, outbox.relay._ReadAhead.take

    def run(profiler: cProfile.Profile | None, *, marking: bool = True, count: int = count) -> tuple[int, float, int]:
        created = insert_events(count, min(aggregates, count), aggregate_base=AGGREGATE_BASE + 50_000_000)
        ids = [e.id for e in created]
        vacuum_outbox(lock)
        relay = OutboxRelay(topic=topic, batch_size=batch_size,
                            producer_factory=lambda: TimedProducer(new_producer(), times))  # fmt: skip
        warm_up(relay._producer(), topic)
        for spent in (times, reads, marks):
            spent.clear()
        waits: list[float] = []
        outbox.relay.read_pending = timed(original[0], reads)
        outbox.relay.mark_published = timed(original[1] if marking else lambda ids: None, marks)
        outbox.relay._ReadAhead.take = timed(original[2], waits)
        wrapper = connection  # this thread's DatabaseWrapper; atomic() commits through its _commit()
        original_commit = wrapper._commit

        def timed_commit():
            began = time.perf_counter()
            try:
                return original_commit()
            finally:
                times["SQL COMMIT"] = times.get("SQL COMMIT", 0.0) + time.perf_counter() - began

        wrapper._commit = timed_commit
        try:
            with connection.execute_wrapper(timing):
                began = time.perf_counter()
                if profiler:
                    profiler.enable()
                if marking:
                    published = relay.drain()
                else:  # one run: a next one would read the same (unmarked) events again
                    published = relay.publish(max_batches=count // relay.batch_size + 1).published
                if profiler:
                    profiler.disable()
                seconds = time.perf_counter() - began
        finally:
            del wrapper._commit
            outbox.relay.read_pending, outbox.relay.mark_published, outbox.relay._ReadAhead.take = original
        times["waiting for a read-ahead batch"] = sum(waits)
        relay._close()
        left = OutboxEvent.objects.filter(id__in=ids, published_at__isnull=True).count()
        OutboxEvent.objects.filter(id__in=ids).delete()
        return published, seconds, left

    published, seconds, left = run(None)
    batches = max(1, len(reads))
    print()
    print(f"where drain() spends its time: {published:,} events in {seconds:.2f} s = {published / seconds:,.0f} "
          f"events/s, {batches} batches ({left} left unpublished), no profiler")  # fmt: skip
    rows = []

    def row(phase: str, spent: float, per: int, share: str) -> list[str]:
        return [phase, f"{spent:.3f}", f"{spent / max(per, 1) * 1000:.1f}", f"{spent / max(published, 1) * 1e6:.1f}",
                share]  # fmt: skip

    for phase, spent in sorted(times.items(), key=lambda kv: -kv[1]):
        rows.append(row(phase, spent, batches, f"{spent / seconds:.0%}"))
    rest = seconds - sum(times.values()) - reads[0] if reads else 0.0
    if reads:
        rows.append(row("the run's first read (SQL + rows to messages)", reads[0], 1, f"{reads[0] / seconds:.0%}"))
    rows.append(row("Python: closures, delivery callbacks, the rest", rest, batches, f"{rest / seconds:.0%}"))
    for label, spent in (("reads (SQL + rows to messages)", reads), ("marking UPDATEs", marks)):
        rows.append(row(f"overlapped: {len(spent)} {label}, all threads", sum(spent), len(spent),
                        f"({sum(spent) / seconds:.0%})"))  # fmt: skip
    _harness.print_table(["phase", "seconds", "ms/batch", "us/event", "share"], rows)
    if len(reads) >= 10:
        tenth = len(reads) // 10
        print(f"  reads: first tenth {sum(reads[:tenth]) / tenth * 1000:.1f} ms each, "
              f"last tenth {sum(reads[-tenth:]) / tenth * 1000:.1f} ms each")  # fmt: skip

    bounds = []
    for _ in range(bound_rounds):
        published, seconds, _ = run(None, marking=False, count=bound_events)
        bounds.append(published / seconds)
    bound = statistics.median(bounds)
    versus = f" = {bound / ceiling:.2f} of the ceiling" if ceiling else ""
    print(f"bound: marking switched off, {bound_events:,} events, median of {bound_rounds}: {bound:,.0f} events/s"
          f"{versus} (rounds {', '.join(fmt_rate(b) for b in bounds)})")  # fmt: skip

    profiler = cProfile.Profile()
    published, seconds, left = run(profiler)
    print()
    print(f"cProfile of drain(): {published:,} events in {seconds:.2f} s ({published / seconds:,.0f} events/s with the "
          "profiler's overhead); top functions by own time:")  # fmt: skip
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(16)
    lines = out.getvalue().splitlines()
    header = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    for line in lines[header:]:
        if line.strip():
            print("  " + line.replace(str(ROOT) + "/", "").replace(sys.prefix + "/lib/python3.11/site-packages/", ""))


def vacuum_outbox(lock: BenchLock) -> str:
    """VACUUM (ANALYZE) outbox_events and the relay's queue, as autovacuum would on a production
    database; returns what it found. (VACUUM cannot run in a transaction: the lock's autocommit
    connection runs it.)"""
    from outbox.models import OutboxEvent, UnpublishedEvent

    table = OutboxEvent._meta.db_table
    dead = lock.conn.execute(
        "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [table]
    ).fetchone()
    autovacuum = lock.conn.execute("SHOW autovacuum").fetchone()[0]
    began = time.perf_counter()
    lock.conn.execute(f"VACUUM (ANALYZE) {table}")
    lock.conn.execute(f"VACUUM (ANALYZE) {UnpublishedEvent._meta.db_table}")
    return (f"VACUUM (ANALYZE) {table} and its queue before timing: {time.perf_counter() - began:.1f} s "
            f"(it had ~{dead[0]:,} live / ~{dead[1]:,} dead tuples; autovacuum={autovacuum})")  # fmt: skip


def delete_events(ids: list[int]) -> None:
    from outbox.models import OutboxEvent

    for start in range(0, len(ids), 10_000):
        OutboxEvent.objects.filter(id__in=ids[start : start + 10_000]).delete()


def part1(args, topic: str, original_topic: str, lock: BenchLock) -> dict:

    print(f"part 1: throughput, topic {topic}, {args.rounds} round(s) (median reported)")
    foreign = unpublished_count()
    if foreign:
        print(f"  {foreign} unpublished event(s) already in the development outbox: publishing them first "
              f"to {original_topic} with the relay")  # fmt: skip
        done = publish_foreign_events(original_topic)
        print(f"  published {done}; {unpublished_count()} still unpublished")
    from outbox.relay import new_producer

    startup_s = warm_up(new_producer(), topic)
    runs: list[dict] = []
    for round_no in range(1, args.rounds + 1):
        began = time.perf_counter()
        events = insert_events(args.events, args.aggregates)
        ids = [e.id for e in events]
        inserted_s = time.perf_counter() - began
        vacuum = "" if args.no_vacuum else vacuum_outbox(lock)
        began = time.perf_counter()
        messages = [(e.aggregate_id.encode(), envelope(e), relay_headers(e)) for e in events]
        encode_s = time.perf_counter() - began
        if round_no == 1:
            sizes = [len(v) for _, v, _ in messages]
            print(f"  inserted {len(events):,} events ({args.aggregates:,} aggregate_ids) in {inserted_s:.1f} s "
                  "(bulk_create, untimed)")  # fmt: skip
            if vacuum:
                print("  " + vacuum)
            print(f"  envelope: {sum(sizes) / len(sizes):.0f} bytes on average; envelope() of all {len(events):,} "
                  f"took {encode_s:.2f} s ({encode_s / len(events) * 1e6:.0f} us each)")  # fmt: skip
        relay_s, relay_published, failures = time_relay(topic, ids, args.batch_size)
        bare_s, bare_errors = time_bare(topic, messages)
        inline_s, _ = time_bare(topic, events, encode=True)
        alone_s, alone_errors = time_send_and_wait(topic, messages[: args.floor_events])
        delete_events(ids)
        floor_ids = [e.id for e in insert_events(args.floor_events, args.floor_events, aggregate_base=FLOOR_BASE)]
        floor_s, floor_published = time_case_study(topic, args.floor_events)
        delete_events(floor_ids)
        run = {
            "relay": args.events / relay_s, "bare": args.events / bare_s, "inline": args.events / inline_s,
            "floor": floor_published / floor_s, "floor_ms": floor_s / floor_published * 1000,
            "alone": args.floor_events / alone_s, "alone_ms": alone_s / args.floor_events * 1000,
            "failures": failures, "extra": relay_published - args.events, "errors": bare_errors + alone_errors,
        }  # fmt: skip
        runs.append(run)
        print(f"  round {round_no}: relay {fmt_rate(run['relay'])}/s, ceiling {fmt_rate(run['bare'])}/s, "
              f"ceiling incl. encoding {fmt_rate(run['inline'])}/s, floor {fmt_rate(run['floor'])}/s, "
              f"send-and-wait alone {fmt_rate(run['alone'])}/s")  # fmt: skip

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    def spread(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{fmt_rate(min(values))}..{fmt_rate(max(values))}" if len(values) > 1 else ""

    relay_rate, bare_rate, inline_rate, floor_rate = med("relay"), med("bare"), med("inline"), med("floor")
    alone_rate = med("alone")
    failures, extra = sum(r["failures"] for r in runs), sum(max(0, r["extra"]) for r in runs)
    print()
    _harness.print_table(
        ["approach", "events", "events/s (median)", "range", "note"],
        [
            ["relay: OutboxRelay().drain()", f"{args.events:,}", fmt_rate(relay_rate), spread("relay"),
             f"batch {args.batch_size or 'default'}, {failures} failed batch(es)"
             + (f", +{extra // len(runs):,} others' events/round" if extra else "")],
            ["(a) ceiling: bare producer, 1 flush", f"{args.events:,}", fmt_rate(bare_rate), spread("bare"),
             "pre-encoded envelopes, new_producer() config"],
            ["    same, envelope() encoded inline", f"{args.events:,}", fmt_rate(inline_rate), spread("inline"),
             "info: the JSON encoding the relay also does"],
            ["(b) floor: the case study's relay", f"{args.floor_events:,}", fmt_rate(floor_rate), spread("floor"),
             f"{med('floor_ms'):.2f} ms per event: send-and-wait + UPDATE"],
            ["    send-and-wait alone, no database", f"{args.floor_events:,}", fmt_rate(alone_rate), spread("alone"),
             f"info: {med('alone_ms'):.2f} ms per produce + flush"],
        ],
    )  # fmt: skip
    ratio_ceiling, ratio_floor = relay_rate / bare_rate, relay_rate / floor_rate
    ok_c, ok_f = ratio_ceiling >= GOALS["ceiling"], ratio_floor >= GOALS["floor"]
    print()
    print(f"  relay / ceiling = {ratio_ceiling:.2f}   (goal >= {GOALS['ceiling']})  {'OK' if ok_c else 'MISSED'}")
    print(f"  relay / floor   = {ratio_floor:.1f}x  (goal >= {GOALS['floor']:.0f}x)  {'OK' if ok_f else 'MISSED'}")
    print(f"  (ceiling / floor = {bare_rate / floor_rate:.1f}x: the most any relay could reach against this broker; "
          f"relay / ceiling incl. encoding = {relay_rate / inline_rate:.2f}; "
          f"relay / send-and-wait alone = {relay_rate / alone_rate:.1f}x)")  # fmt: skip
    print(f"  every producer above was connected before its timing began (a first delivery: {startup_s:.2f} s, "
          "once per process)")  # fmt: skip
    if extra:
        print(f"  note: the relay also published {extra} event(s) that other processes wrote meanwhile")
    if any(r["errors"] for r in runs):
        print(f"  note: {sum(r['errors'] for r in runs)} delivery error(s) in the ceiling/floor runs")
    return {"ok": ok_c and ok_f, "ok_ceiling": ok_c, "ok_floor": ok_f, "ceiling": bare_rate}


# --- Part 2: lag --------------------------------------------------------------------------------


def ensure_shoppers(count: int) -> list[int]:
    """Shoppers BENCH-RL-00001... (unusable passwords: they never log in), their ids in order."""
    return _harness.ensure_user_ids(count, prefix=PREFIX)


fill_carts = _harness.fill_carts


def outbox_write_rate(seconds: float = 1.0) -> float:
    """Outbox events other processes commit per second right now (the relay publishes them too)."""
    from django.db.models import Max

    from outbox.models import OutboxEvent

    last = OutboxEvent.objects.aggregate(m=Max("id"))["m"] or 0
    time.sleep(seconds)
    return OutboxEvent.objects.filter(id__gt=last).count() / seconds


class Child:
    """A subprocess of the bench (the relay, the consumer), stopped on exit however the bench exits:
    SIGTERM (graceful), SIGKILL after `stop_timeout`, PR_SET_PDEATHSIG if the bench is killed."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], *, pipe_stdout: bool = False) -> None:
        self.name, self.command = name, command
        self.env = {**os.environ, **PRODUCTION_LIKE_ENV, **env}
        self.env.pop("PYTEST_VERSION", None)
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".txt", delete=False)
        self.pipe_stdout = pipe_stdout
        self.proc: subprocess.Popen | None = None

    def start(self) -> Child:
        import atexit

        self.proc = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.pipe_stdout else self.log,
            stderr=self.log if self.pipe_stdout else subprocess.STDOUT,
            text=True,
            bufsize=1,
            preexec_fn=_harness._die_with_parent,
        )
        atexit.register(self.stop)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        return _harness.process_cpu_seconds(self.proc.pid) if self.proc else 0.0

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError):
            self.log.close()
            if proc.returncode in (0, -signal.SIGTERM):
                os.unlink(self.log.name)
        return proc.returncode


def consumer_child(name: str) -> int:
    """The lag consumer, run as `bench/relay.py --consumer-child NAME` by part 2: a real EventConsumer
    (its topic and group from KAFKA_ORDERS_TOPIC / KAFKA_CONSUMER_GROUP_PREFIX) with a handler for
    OrderCreated whose effect is a timestamp taken when its transaction commits. One line per
    applied event on stdout: E order_id produced_ms received effect done (wall clock, seconds); and
    when it stops, a DONE line with its counts and offset commits.

    Unless BENCH_RL_ALL=1, messages whose data.customer_id is not a bench shopper's (listed in the
    file BENCH_RL_CUSTOMERS) are skipped before EventConsumer.apply(): events other processes
    write to the development outbox meanwhile are relayed to the bench topic too, and would
    otherwise load the consumer with work that is not the bench's."""
    setup_django()
    import json

    from django.db import transaction

    from outbox.consumers import EventConsumer, register
    from outbox.shutdown import stop_on_sigterm

    state: dict = {}

    @register(name, "OrderCreated")
    def on_order_created(event):
        state["order"] = int(event.data["order_id"])
        transaction.on_commit(lambda: state.__setitem__("effect", time.time()))

    apply_all = os.environ.get("BENCH_RL_ALL") == "1"
    customers = {int(x) for x in Path(os.environ["BENCH_RL_CUSTOMERS"]).read_text().split()}
    skipped = [0]

    class TimedConsumer(EventConsumer):
        def apply(self, message):
            received = time.time()
            if not apply_all:
                with contextlib.suppress(Exception):
                    if json.loads(message.value())["data"].get("customer_id") not in customers:
                        skipped[0] += 1
                        return
            state.clear()
            super().apply(message)
            done = time.time()
            if "order" in state:
                produced_ms = message.timestamp()[1]  # CreateTime: set by the relay's producer at produce()
                print(f"E {state['order']} {produced_ms} {received:.6f} {state.get('effect', 0.0):.6f} {done:.6f}",
                      flush=True)  # fmt: skip

    spent = {"poll": 0.0, "commit": 0.0, "polls": 0, "commits": 0}

    class TimedKafkaConsumer:  # wraps the confluent-kafka Consumer: time in poll() and commit()
        def __init__(self, inner):
            self._inner = inner

        def poll(self, *args, **kwargs):
            began = time.perf_counter()
            try:
                return self._inner.poll(*args, **kwargs)
            finally:
                spent["poll"] += time.perf_counter() - began
                spent["polls"] += 1

        def commit(self, *args, **kwargs):
            began = time.perf_counter()
            try:
                return self._inner.commit(*args, **kwargs)
            finally:
                spent["commit"] += time.perf_counter() - began
                spent["commits"] += 1

        def __getattr__(self, attr):
            return getattr(self._inner, attr)

    stop = stop_on_sigterm()
    consumer = TimedConsumer(name=name)
    consumer.consumer = TimedKafkaConsumer(consumer.consumer)
    print("READY", flush=True)
    consumer.run(should_stop=stop.is_set)
    commits = max(spent["commits"], 1)
    print(f"DONE processed={consumer.processed} duplicates={consumer.duplicates} dead={consumer.dead_lettered} "
          f"skipped_foreign={skipped[0]} offset_commits={spent['commits']} "
          f"ms_per_offset_commit={spent['commit'] / commits * 1000:.1f}", flush=True)  # fmt: skip
    return 0


def part2(args, topic: str, run_id: str) -> dict:
    from django.conf import settings
    from django.db import connection

    from orders.services import place_order

    total = math.ceil(args.rate * args.seconds)
    warmup = 20
    print(f"part 2: lag at {args.rate:g} orders/s for {args.seconds:g} s ({total:,} orders, {args.threads} threads), "
          f"topic {topic}")  # fmt: skip
    began = time.perf_counter()
    skus = _harness.ensure_products(args.skus, prefix=PREFIX, stock=1_000_000)
    shoppers = ensure_shoppers(total + warmup)
    fill_carts([(cid, {skus[i % len(skus)]: 1}) for i, cid in enumerate(shoppers)])
    print(f"  {len(skus)} products, {len(shoppers):,} shoppers and their one-line carts ready in "
          f"{time.perf_counter() - began:.1f} s")  # fmt: skip
    others = outbox_write_rate()
    if others:
        print(f"  warning: other processes write ~{others:.0f} outbox events/s to the development database right now;"
              " relay_outbox publishes them to the bench topic too and the consumer applies them")  # fmt: skip

    consumer_name = f"bench_lag_{run_id}"
    customers_file = tempfile.NamedTemporaryFile("w", prefix="bench-relay-customers-", suffix=".txt", delete=False)
    with customers_file:
        customers_file.write("\n".join(map(str, shoppers)))
    env = {
        "KAFKA_ORDERS_TOPIC": topic,
        "KAFKA_CONSUMER_GROUP_PREFIX": settings.KAFKA_CONSUMER_GROUP_PREFIX,
        "BENCH_RL_CUSTOMERS": customers_file.name,
        "BENCH_RL_ALL": "1" if args.consumer_all else "0",
    }
    python = str(ROOT / ".venv" / "bin" / "python")
    relay = Child("relay", [python, "manage.py", "relay_outbox"], env).start()
    consumer = Child("consumer", [python, str(Path(__file__).resolve()), "--consumer-child", consumer_name], env,
                     pipe_stdout=True).start()  # fmt: skip
    # order id -> produced, received, effect, done (wall clock)
    seen: dict[int, tuple[float, float, float, float]] = {}
    consumer_lines: list[str] = []

    def read_consumer():
        for line in consumer.proc.stdout:
            if line.startswith("E "):
                _, order, produced_ms, received, effect, done = line.split()
                seen[int(order)] = (int(produced_ms) / 1000, float(received), float(effect), float(done))
            else:
                consumer_lines.append(line.strip())

    reader = threading.Thread(target=read_consumer, name="bench-consumer-reader", daemon=True)
    reader.start()
    results: dict = {"ok": False, "consumer_name": consumer_name}
    try:
        began = time.perf_counter()
        warm_ids = [
            place_order(customer_id=shoppers[total + i], idempotency_key=f"bench-rl-{run_id}-w{i}").order.id
            for i in range(warmup)
        ]
        deadline = time.monotonic() + 90
        while not all(o in seen for o in warm_ids):
            for child in (relay, consumer):
                if not child.alive():
                    raise RuntimeError(f"{child.name} exited:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"warm-up orders did not reach the consumer within 90 s; relay log:\n{relay.tail()}"
                                   f"\nconsumer log:\n{consumer.tail()}")  # fmt: skip
            time.sleep(0.05)
        print(
            f"  warm-up: {warmup} orders through relay_outbox and the consumer in {time.perf_counter() - began:.1f} s"
        )

        commit_at: dict[int, float] = {}  # order id -> wall clock right after place_order returned
        tickets = itertools.count()
        late: list[float] = []
        errors: list[str] = []
        start = time.perf_counter() + 0.2
        cpu_before = {"relay": relay.cpu_seconds(), "consumer": consumer.cpu_seconds(),
                      "bench (place_order)": _harness.process_cpu_seconds(os.getpid())}  # fmt: skip
        busy_before = _harness._cpu_times()

        def shopper_thread():
            try:
                while True:
                    i = next(tickets)
                    if i >= total:
                        return
                    delay = start + i / args.rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        late.append(-delay)
                    try:
                        placed = place_order(customer_id=shoppers[i], idempotency_key=f"bench-rl-{run_id}-{i}")
                    except Exception as exc:  # reported, not fatal
                        errors.append(f"{type(exc).__name__}: {exc}")
                        continue
                    commit_at[placed.order.id] = time.time()
            finally:
                connection.close()

        workers = [threading.Thread(target=shopper_thread, name=f"bench-shopper-{n}") for n in range(args.threads)]
        t0_wall = time.time() + (start - time.perf_counter())
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        load_s = max(commit_at.values(), default=t0_wall) - t0_wall
        deadline = time.monotonic() + 30
        while any(o not in seen for o in commit_at) and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu = {"relay": relay.cpu_seconds(), "consumer": consumer.cpu_seconds(),
               "bench (place_order)": _harness.process_cpu_seconds(os.getpid())}  # fmt: skip
        busy_after = _harness._cpu_times()
        wall = max([v[3] for o, v in seen.items() if o in commit_at] + [time.time()]) - t0_wall
        alive = {child.name: child.alive() for child in (relay, consumer)}

        mine = [o for o in commit_at if o in seen]
        foreign = len(set(seen) - set(commit_at) - set(warm_ids))
        produced = [(seen[o][0] - commit_at[o]) * 1000 for o in mine]
        received = [(seen[o][1] - commit_at[o]) * 1000 for o in mine]
        effect = [(seen[o][2] - commit_at[o]) * 1000 for o in mine]
        handling = [(seen[o][3] - seen[o][1]) * 1000 for o in mine]
        fetch = [(seen[o][1] - seen[o][0]) * 1000 for o in mine]
        missing = len(commit_at) - len(mine)
        behind = [x for x in late if x > 0.05]
        achieved = len(commit_at) / max(load_s, 1e-9)
        print(f"  placed {len(commit_at):,} orders in {load_s:.1f} s = {achieved:.0f} orders/s"
              f" ({len(errors)} errors; {len(behind)} started > 50 ms behind schedule,"
              f" at most {max(late, default=0) * 1000:.0f} ms)")  # fmt: skip
        if errors:
            print(f"  first error: {errors[0]}")
        print()
        rows = []
        for name, values in (
            ("commit -> produced by relay_outbox (CreateTime)", produced),
            ("commit -> the consumer starts applying it", received),
            ("  of which produced -> applying (broker, fetch, batch)", fetch),
            ("commit -> consumer's effect committed", effect),
            ("consumer apply() (its transaction, retries)", handling),
        ):
            rows.append([name, f"{len(values):,}", f"{pct(values, 50):.0f}", f"{pct(values, 90):.0f}",
                         f"{pct(values, 99):.0f}", f"{max(values, default=0):.0f}"])  # fmt: skip
        _harness.print_table(["lag (ms)", "orders", "p50", "p90", "p99", "max"], rows)
        # Lag over the run: does it stay flat or grow (a stage that cannot keep up)?
        windows: dict[int, list[float]] = {}
        for o in mine:
            windows.setdefault(int((commit_at[o] - t0_wall) // 5), []).append((seen[o][2] - commit_at[o]) * 1000)
        print("  effect lag by 5 s window of commit time (p50/p99 ms): " + ", ".join(
            f"{w * 5}-{w * 5 + 5}s {pct(v, 50):.0f}/{pct(v, 99):.0f}" for w, v in sorted(windows.items())))  # fmt: skip
        if mine:
            span = max(seen[o][3] for o in mine) - min(seen[o][1] for o in mine)
            applied_rate = len(mine) / max(span, 1e-9)
            print(f"  consumer: {len(mine):,} events applied in {span:.1f} s = {applied_rate:.0f} events/s "
                  f"(the input was {achieved:.0f}/s; lower means it could not keep up)")  # fmt: skip
        total_busy = (busy_after[0] - busy_before[0]) or 1
        machine = 1 - (busy_after[1] - busy_before[1]) / total_busy
        print(f"  CPU seconds over {wall:.1f} s: " + ", ".join(f"{k} {cpu[k] - cpu_before[k]:.1f}" for k in cpu)
              + f"; machine {machine:.0%} busy ({os.cpu_count()} CPUs)")  # fmt: skip
        p99 = pct(effect, 99) if effect else float("inf")
        ok = p99 < GOALS["p99_ms"] and missing == 0 and not errors
        print()
        verdict = "OK" if ok else "MISSED"
        print(f"  p99 lag (commit -> effect) = {p99:.0f} ms  (goal < {GOALS['p99_ms']:.0f} ms)  {verdict}"
              + (f"; {missing} order(s) did not reach the consumer within 30 s" if missing else ""))  # fmt: skip
        for name, up in alive.items():
            if not up:
                print(f"  {name} died during the run")
        if foreign:
            print(f"  note: the consumer also applied {foreign} OrderCreated event(s) other processes wrote meanwhile")
        results["foreign_events_per_s"] = others
        results["ok"] = ok
    finally:
        codes = {child.name: child.stop() for child in (relay, consumer)}
        with contextlib.suppress(OSError):
            os.unlink(customers_file.name)
        reader.join(5)
        done = next((line for line in consumer_lines if line.startswith("DONE")), "")
        print(f"  stopped: relay_outbox exit {codes['relay']}, consumer exit {codes['consumer']} {done}".rstrip())
    return results


# --- Main ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.consumer_child:
        return consumer_child(args.consumer_child)
    setup_django()
    from django.conf import settings

    run_id = time.strftime("%Y%m%d%H%M%S") + f"{os.getpid() % 1000:03d}"
    topic, lag_topic = f"bench.relay.{run_id}", f"bench.relay.{run_id}.lag"
    original_topic = settings.KAFKA_ORDERS_TOPIC
    settings.KAFKA_ORDERS_TOPIC = topic
    settings.KAFKA_CONSUMER_GROUP_PREFIX = f"bench.relay.{run_id}."

    lock = BenchLock()
    if not lock.acquire():
        print("another bench/relay.py holds the bench lock on this database: try again later", file=sys.stderr)
        return 2
    from outbox.topics import ensure_topics

    print(f"bench/relay.py: {os.cpu_count()} CPU(s), broker {settings.KAFKA_BOOTSTRAP_SERVERS}, "
          f"batch size {args.batch_size or settings.OUTBOX_BATCH_SIZE}, DEBUG={settings.DEBUG}")  # fmt: skip
    relays = other_relays()
    if relays:
        print("warning: other relay processes run on this machine and may publish the bench's events:\n  "
              + "\n  ".join(relays), file=sys.stderr)  # fmt: skip
    _harness.warn_if_busy()
    leftovers = cleanup()
    if any(leftovers.values()):
        print(f"cleaned up a previous run's leftovers: {leftovers}")
    topics = [topic, lag_topic, f"{lag_topic}.dlq"]
    ensure_topics(topics=topics)
    results: dict[str, dict] = {}
    consumer_names: list[str] = []
    try:
        if not args.skip_throughput:
            results["throughput"] = part1(args, topic, original_topic, lock)
            if args.profile or not results["throughput"]["ok"]:
                phase_split(topic, args.profile_events, args.aggregates, args.batch_size, lock,
                            results["throughput"].get("ceiling"), bound_events=args.events,
                            bound_rounds=args.rounds)  # fmt: skip
            print()
        if not args.skip_lag:
            if unpublished_count():
                print(f"  {unpublished_count()} unpublished event(s) in the outbox: relay_outbox will publish them too")
            results["lag"] = part2(args, lag_topic, run_id)
            consumer_names.append(results["lag"]["consumer_name"])
    finally:
        print()
        done = cleanup(consumer_names)
        print(f"cleanup: {done}; topics {', '.join(topics)} {delete_topics(topics)}")
        lock.close()
    ok = all(r.get("ok") for r in results.values())
    if not results:
        print("nothing measured (--skip-throughput and --skip-lag): clean-up only")
        return 0
    print("all goals met" if ok else "goal(s) missed: " + ", ".join(k for k, r in results.items() if not r.get("ok")))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
