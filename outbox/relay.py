"""The outbox relay: unpublished events -> Kafka, at least once, in order per
aggregate.

One batch is one transaction. It first takes a transaction-level advisory
lock, so that only one relay (process or Celery task) publishes at a time:
events of one order then reach Kafka in the order they were written even
with several relays running. It reads the oldest unpublished events, produces
them all asynchronously with an idempotent producer, flushes once, and marks
the acknowledged ones published with one UPDATE. Whatever was not
acknowledged stays unpublished, with `attempts` and `last_error`, and the
relay backs off; after a failure the producer is thrown away and recreated,
so a broker that restarted empty (or a stalled idempotent producer) does not
block it.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.kafka import client_config
from config.metrics import RELAY_FAILURES, RELAY_PUBLISHED
from outbox.models import OutboxEvent
from outbox.topics import ensure_topics

logger = logging.getLogger(__name__)

# Any constant shared by every relay; "outbox" in ASCII.
RELAY_LOCK_KEY = 0x6F7574626F78


@dataclass(frozen=True)
class BatchResult:
    published: int
    failed: int
    leader: bool = True


@dataclass(frozen=True)
class PendingEvent:
    id: int
    key: bytes
    value: bytes  # the JSON envelope
    headers: dict[str, str]


# The batch is read with plain SQL and PostgreSQL writes each envelope: making
# model instances and re-encoding their JSON in Python was half of the relay's
# time (bench/relay.py). The envelope is the contract documented in the README.
_READ_BATCH = f"""
    SELECT id, aggregate_id, event_id::text, event_type, request_id,
           json_build_object(
               'event_id', event_id, 'event_type', event_type, 'occurred_at', created_at,
               'aggregate_type', aggregate_type, 'aggregate_id', aggregate_id, 'data', payload
           )::text
    FROM {OutboxEvent._meta.db_table}
    WHERE published_at IS NULL
    ORDER BY id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
"""


def read_pending(limit: int) -> list[PendingEvent]:
    with connection.cursor() as cursor:
        cursor.execute(_READ_BATCH, [limit])
        return [
            PendingEvent(
                id=row_id,
                key=aggregate_id.encode(),
                value=envelope.encode(),
                headers={"event_id": event_id, "event_type": event_type, "request_id": request_id},
            )
            for row_id, aggregate_id, event_id, event_type, request_id, envelope in cursor.fetchall()
        ]


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
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [RELAY_LOCK_KEY])
                if not cursor.fetchone()[0]:
                    return BatchResult(0, 0, leader=False)
            events = read_pending(self.batch_size)
            if not events:
                return BatchResult(0, 0)
            acked, errors = self._produce(events)
            if self.before_mark:
                self.before_mark(acked)
            if acked:
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"UPDATE {OutboxEvent._meta.db_table} SET published_at = %s WHERE id = ANY(%s)",
                        [timezone.now(), acked],
                    )
            if errors:
                _record_failures(errors)
        RELAY_PUBLISHED.inc(len(acked))
        if errors:
            RELAY_FAILURES.inc(len(errors))
            self._failed()
            logger.warning(
                "relay: %d event(s) published, %d not delivered (%s); retrying with backoff",
                len(acked), len(errors), next(iter(errors.values())),
            )
        else:
            self.failures_in_a_row = 0
        return BatchResult(len(acked), len(errors))

    def _produce(self, events: list[PendingEvent]) -> tuple[list[int], dict[int, str]]:
        acked: list[int] = []
        errors: dict[int, str] = {}
        try:
            producer = self._producer()
            for event in events:

                def on_delivery(error, message, event_id=event.id):
                    if error is None:
                        acked.append(event_id)
                    else:
                        errors[event_id] = str(error)

                producer.produce(
                    self.topic, key=event.key, value=event.value, headers=event.headers, on_delivery=on_delivery
                )
                producer.poll(0)
            remaining = producer.flush(settings.OUTBOX_FLUSH_TIMEOUT_SECONDS)
        except (KafkaException, BufferError) as exc:
            remaining = -1
            reason = f"{type(exc).__name__}: {exc}"
        else:
            reason = "not acknowledged before the flush timeout"
        if remaining or errors:
            # Stalled or failed: start again from a fresh producer next time.
            self._discard_producer()
        done = set(acked) | set(errors)
        for event in events:
            if event.id not in done:
                errors[event.id] = reason
        return acked, errors

    def _failed(self) -> None:
        self.failures_in_a_row += 1
        backoff = min(settings.OUTBOX_MAX_BACKOFF_SECONDS, 0.25 * 2 ** (self.failures_in_a_row - 1))
        self.retry_at = time.monotonic() + backoff

    def drain(self, *, max_batches: int | None = None) -> int:
        """Publish until nothing is left (or a batch fails); returns the count."""
        total = 0
        for _ in range(max_batches or 10**9):
            result = self.publish_batch()
            total += result.published
            if result.failed or not result.leader or result.published < self.batch_size:
                break
        return total

    def run_forever(self, *, should_stop: Callable[[], bool]) -> None:
        logger.info("relay: publishing outbox events to %s", self.topic)
        while not should_stop():
            try:
                result = self.publish_batch()
            except Exception:  # keep relaying whatever happens; the events wait in the table
                logger.exception("relay batch failed")
                self._failed()
                result = BatchResult(0, 1)
                connection.close()
            if result.published == self.batch_size and not result.failed:
                continue  # more are waiting: no pause
            pause = max(self.retry_at - time.monotonic(), settings.OUTBOX_POLL_INTERVAL_SECONDS)
            _sleep(pause, should_stop)
        self._close()

    def _close(self) -> None:
        if self.producer is not None:
            self.producer.flush(settings.OUTBOX_FLUSH_TIMEOUT_SECONDS)
            self.producer = None


def _record_failures(errors: dict[int, str]) -> None:
    ids = list(errors)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {OutboxEvent._meta.db_table} AS e
            SET attempts = e.attempts + 1, last_error = failed.error
            FROM unnest(%s::bigint[], %s::text[]) AS failed(id, error)
            WHERE e.id = failed.id
            """,
            [ids, [errors[i][:1000] for i in ids]],
        )


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
