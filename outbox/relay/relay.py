"""The relay's runs. A run holds the leader lock, so only one relay (process
or Celery task) publishes at a time, and is one REPEATABLE READ transaction
that reads the unpublished events of one snapshot in id order, batch after
batch. The snapshot is what keeps the order per order: a later event of an
order is written only after the earlier one committed, so it is never
visible without it. While Kafka acknowledges a batch, the next is produced.

Kafka's acknowledgement always comes before the mark. Whatever was not
acknowledged stays unpublished, with `attempts` and `last_error`; the relay
backs off, and after a failure its producer is thrown away and recreated, so
a broker that restarted empty (or a stalled idempotent producer) does not
block it.

A run is recorded (`RelayRun`) before it produces and deleted once all it
produced is marked. A leader that finds one left over (a relay killed between
Kafka's acknowledgement and the mark, a batch not acknowledged) first marks
the events Kafka already has (`recovery`), so that each event reaches Kafka
once.
"""

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.backoff import backoff_seconds
from core.kafka import client_config
from outbox.metrics import RELAY_FAILURES, RELAY_PUBLISHED
from outbox.relay import recovery, sql, threads
from outbox.topics import ensure_topics

logger = logging.getLogger("outbox.relay")  # the one name of the relay's log lines

# Batches produced and not yet settled: the next batch is produced while Kafka
# acknowledges the previous one.
PIPELINE_DEPTH = 2
# Batches of one run (one snapshot, one transaction).
RUN_BATCHES = 20


@dataclass(frozen=True)
class BatchResult:
    published: int
    failed: int
    leader: bool = True


@dataclass
class InFlight:
    """A batch handed to the producer: its delivery reports arrive on poll()."""

    ids: list[int]
    deadline: float
    acked: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return len(self.acked) + len(self.errors) >= len(self.ids)


def new_producer() -> Producer:
    return Producer(
        client_config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 10_000,
                "message.timeout.ms": settings.KAFKA_MESSAGE_TIMEOUT_MS,
                "socket.connection.setup.timeout.ms": 5_000,
                # Never let a produce create the topic: a broker that restarted empty
                # would give it its default partition count. The batch fails instead,
                # and the next run's ensure_topics() creates it with ours.
                "allow.auto.create.topics": False,
            }
        )
    )


class OutboxRelay:
    def __init__(
        self,
        *,
        topic: str | None = None,
        batch_size: int | None = None,
        producer_factory: Callable[[], Producer] = new_producer,
    ) -> None:
        self.topic = topic or settings.KAFKA_ORDERS_TOPIC
        self.batch_size = batch_size or settings.OUTBOX_BATCH_SIZE
        self.producer_factory = producer_factory
        self.producer: Producer | None = None
        self.failures_in_a_row = 0
        self.retry_at = 0.0  # time.monotonic() before which a failed relay waits
        # A fault hook for tests: called after Kafka acknowledged, before marking.
        self.before_mark: Callable[[list[int]], None] | None = None

    def _producer(self) -> Producer:
        if self.producer is None:
            ensure_topics(topics=[self.topic], timeout=settings.OUTBOX_FLUSH_TIMEOUT_SECONDS)
            self.producer = self.producer_factory()
        return self.producer

    def _discard_producer(self) -> None:
        if self.producer is not None:
            try:
                self.producer.purge()
                self.producer.flush(0)
            except Exception:  # a broken producer is dropped either way
                logger.debug("error while discarding the producer", exc_info=True)
        self.producer = None

    def publish_batch(self) -> BatchResult:
        """One batch (at most `batch_size` events)."""
        return self.publish(max_batches=1)

    def drain(self, *, max_batches: int | None = None) -> int:
        """Publish until nothing is left (or a batch fails); returns the count.
        Runs of at most RUN_BATCHES batches: a snapshot is never kept open for
        long (it would hold back VACUUM for the whole database)."""
        total, left = 0, max_batches or 10**9
        while left > 0:
            batches = min(left, RUN_BATCHES)
            result = self.publish(max_batches=batches)
            total += result.published
            left -= batches
            if result.failed or not result.leader or result.published < batches * self.batch_size:
                break
        return total

    def publish(self, *, max_batches: int = RUN_BATCHES) -> BatchResult:
        """One run: at most `max_batches` batches from one snapshot."""
        if connection.in_atomic_block:
            raise RuntimeError("the relay runs its own transactions")
        # The lock is taken before the run's snapshot, which must see
        # everything the previous leader marked.
        if not sql.try_lock():
            return BatchResult(0, 0, leader=False)
        try:
            unchecked = self._recover()
            if unchecked is not None:
                return self._recovery_failed(unchecked)
            run = sql.start_run(self.topic, timezone.now())
            if run is None:
                self.failures_in_a_row = 0
                return BatchResult(0, 0)  # nothing waiting
            with transaction.atomic():
                sql.repeatable_read()
                marker = threads.Marker()
                try:
                    published, errors = self._run(max_batches, marker)
                    marker.wait()
                finally:
                    marker.close()
                if not errors:  # else the run stays unfinished: Kafka may have some of them
                    sql.finish_run(run)  # commits with the last marks
            if errors:  # after the snapshot: staff may have touched these rows meanwhile
                sql.record_failures(errors)
        except BaseException:
            # Whatever the producer still holds would be delivered and never
            # marked: drop it, and back off.
            self._discard_producer()
            self._failed()
            raise
        finally:
            sql.unlock()
        RELAY_PUBLISHED.inc(published)
        if errors:
            RELAY_FAILURES.inc(len(errors))
            self._failed()
            logger.warning(
                "relay: %d event(s) published, %d not delivered (%s); retrying with backoff",
                published,
                len(errors),
                next(iter(errors.values())),
            )
        else:
            self.failures_in_a_row = 0
        return BatchResult(published, len(errors))

    def _recover(self) -> str | None:
        """Marks what an unfinished run got into Kafka; before this run's
        snapshot, which must see those marks. Returns why not, when Kafka
        could not be read (nothing is published then)."""
        for run in sql.unfinished_runs():
            try:
                in_kafka = recovery.event_ids_in_topic(
                    run.topic, since=run.started_at, timeout=settings.OUTBOX_FLUSH_TIMEOUT_SECONDS
                )
            except KafkaException as exc:
                return f"not published: Kafka could not be read for what an unfinished run sent ({exc})"
            with transaction.atomic():
                marked = sql.mark_published_by_event_id(in_kafka)
                sql.finish_run(run.id)
            logger.log(
                logging.WARNING if marked else logging.INFO,
                "relay: a run on %s since %s did not finish; %d of its events were in Kafka already "
                "and are marked published, not sent again",
                run.topic,
                run.started_at,
                marked,
            )
        return None

    def _recovery_failed(self, reason: str) -> BatchResult:
        errors = dict.fromkeys(sql.waiting_ids(self.batch_size), reason)
        if errors:
            sql.record_failures(errors)
            RELAY_FAILURES.inc(len(errors))
        self._discard_producer()
        self._failed()
        logger.warning("relay: %s; retrying with backoff", reason)
        return BatchResult(0, len(errors))

    def _run(self, max_batches: int, marker: threads.Marker) -> tuple[int, dict[int, str]]:
        in_flight: deque[InFlight] = deque()
        published, errors = 0, {}
        reader = threads.ReadAhead(self.batch_size)
        try:
            events: list[sql.PendingEvent] | None = sql.read_pending(self.batch_size)
            reads = 1
            while True:
                failing = errors or any(batch.errors for batch in in_flight)
                ready = events is not None or reader.next is not None
                if ready and not failing and len(in_flight) < PIPELINE_DEPTH:
                    if events is None:
                        events = reader.take()
                    if len(events) == self.batch_size and reads < max_batches:
                        reader.start(after=events[-1][0])  # PostgreSQL reads on while Kafka gets these
                        reads += 1
                    if events:
                        in_flight.append(self._produce(events))
                    events = None
                    continue
                if not in_flight:
                    break
                batch = in_flight.popleft()
                self._settle(batch)
                # A copy: a late delivery report must not change what is marked.
                acked = [event_id for event_id in batch.acked if event_id not in batch.errors]
                if acked:
                    if self.before_mark:
                        self.before_mark(acked)
                    marker.mark(acked, in_background=reads > 1)
                    published += len(acked)
                errors.update(batch.errors)
        finally:
            reader.close()
        if errors:
            self._discard_producer()  # stalled or failed: start again from a fresh producer
        return published, errors

    def _produce(self, events: list[sql.PendingEvent]) -> InFlight:
        batch = InFlight(
            ids=[event[0] for event in events],
            deadline=time.monotonic() + settings.OUTBOX_FLUSH_TIMEOUT_SECONDS,
        )
        acked, errors = batch.acked, batch.errors
        try:
            producer = self._producer()
            produce, topic = producer.produce, self.topic
            for event_id, key, value, uuid, event_type, request_id in events:

                def on_delivery(error, message, event_id=event_id):
                    if error is None:
                        acked.append(event_id)
                    else:
                        errors[event_id] = str(error)

                headers = [("event_id", uuid), ("event_type", event_type), ("request_id", request_id)]
                produce(topic, value, key, headers=headers, on_delivery=on_delivery)
            producer.poll(0)
        except (KafkaException, BufferError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            self._discard_producer()  # what it still held is purged (and reported as failed)
            done = set(acked)
            for event_id in batch.ids:
                if event_id not in done:
                    errors.setdefault(event_id, reason)
        return batch

    def _settle(self, batch: InFlight) -> None:
        """Wait for the batch's delivery reports, until its deadline."""
        while not batch.settled and self.producer is not None:
            remaining = batch.deadline - time.monotonic()
            if remaining <= 0:
                break
            self.producer.poll(min(remaining, 1.0))
        if not batch.settled:
            done = set(batch.acked)
            for event_id in batch.ids:
                if event_id not in done:
                    batch.errors.setdefault(event_id, "not acknowledged before the flush timeout")

    def _failed(self) -> None:
        self.failures_in_a_row += 1
        wait = backoff_seconds(self.failures_in_a_row, first=0.25, cap=settings.OUTBOX_MAX_BACKOFF_SECONDS)
        self.retry_at = time.monotonic() + wait

    def run_forever(self, *, should_stop: Callable[[], bool]) -> None:
        logger.info("relay: publishing outbox events to %s", self.topic)
        while not should_stop():
            try:
                result = self.publish()
            except Exception:  # keep relaying whatever happens; the events wait in the table
                logger.exception("relay run failed")
                connection.close()
                result = BatchResult(0, 1)
            if result.published == RUN_BATCHES * self.batch_size:
                continue  # more are waiting: no pause
            pause = max(self.retry_at - time.monotonic(), settings.OUTBOX_POLL_INTERVAL_SECONDS)
            _sleep(pause, should_stop)
        self._close()

    def _close(self) -> None:
        if self.producer is not None:
            self.producer.flush(settings.OUTBOX_FLUSH_TIMEOUT_SECONDS)
            self.producer = None


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while not should_stop() and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


_task_relay: OutboxRelay | None = None


def publish_outbox(*, max_batches: int = 20) -> int:
    """For the Celery beat task: one relay (and producer) per worker process."""
    global _task_relay
    if _task_relay is None:
        _task_relay = OutboxRelay()
    if time.monotonic() < _task_relay.retry_at:
        return 0  # backing off after a failure
    return _task_relay.drain(max_batches=max_batches)
