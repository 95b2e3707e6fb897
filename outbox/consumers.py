"""Kafka consumers that apply each event once, though delivery is at least once.

Apps register handlers for the effects they own (warehouse in inventory/,
email in orders/, loyalty in shop/). For every message the runner opens one
transaction: insert (consumer, event_id) into processed_events — a duplicate
finds the row and is skipped — then the handler's effect; and only after that
commit does it commit the Kafka offset. A handler that keeps failing sends
the message to the dead-letter topic and the consumer moves on.

A failure of a service the handler stands on (PostgreSQL, Redis, the network)
is not the message's fault: it never counts toward the dead-letter limit. The
consumer keeps that message (its offset stays uncommitted, it is read again),
backs off and tries it again until the service is back, logging once when it
starts waiting and once when it resumes.

Messages are taken from the client in batches of what has arrived: each
still gets its own transaction, and the batch's offsets are committed once
all of them committed (one Kafka round trip, not one per message).

A broker that comes back with an empty log (the development broker restarted)
leaves a consumer's position past the partition's new end, where it would wait
silently until the log grew past it and then skip what came before. While idle,
a consumer (and the queue's writer) compares its position with the partition's
end (PartitionEnds) and reads such a partition from its start: what it applies
again is found applied.
"""

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from django.conf import settings
from django.db import close_old_connections, connections, transaction

from core.backoff import backoff_seconds
from core.db import insert_unless_exists
from core.kafka import GroupConsumer, client_config
from core.outages import failed_service
from core.requestid import request_id_var
from outbox.metrics import CONSUMER_EVENTS, CONSUMER_WAITING
from outbox.models import ProcessedEvent
from outbox.topics import dead_letter_topic

logger = logging.getLogger(__name__)

# At most this many messages between two offset commits.
MAX_BATCH = 100
# A batch ends early after this long (its other messages are read again):
# a consumer that does not poll for max.poll.interval.ms (5 min) is dropped
# from its group, and slow handlers or retries must not get it there.
MAX_BATCH_SECONDS = 30.0
# While a service is down, retries are read again from Kafka between waits: a
# wait is bounded (CONSUMER_MAX_BACKOFF_SECONDS) and sliced so SIGTERM is prompt.
FIRST_BACKOFF_SECONDS = 0.1
STOP_CHECK_SECONDS = 0.1
# An idle consumer compares its positions with the partitions' ends at most this often.
END_CHECK_SECONDS = 1.0


@dataclass(frozen=True)
class Event:
    event_id: uuid.UUID
    event_type: str
    occurred_at: str
    aggregate_type: str
    aggregate_id: str
    data: dict


Handler = Callable[[Event], None]
HANDLERS: dict[str, dict[str, Handler]] = {}


def register(consumer: str, event_type: str) -> Callable[[Handler], Handler]:
    def decorator(handler: Handler) -> Handler:
        HANDLERS.setdefault(consumer, {})[event_type] = handler
        return handler

    return decorator


def parse_event(value: bytes) -> Event:
    body = json.loads(value)
    return Event(
        event_id=uuid.UUID(body["event_id"]),
        event_type=body["event_type"],
        occurred_at=body["occurred_at"],
        aggregate_type=body["aggregate_type"],
        aggregate_id=str(body["aggregate_id"]),
        data=body["data"],
    )


PROCESSED, DUPLICATE, IGNORED = "processed", "duplicate", "ignored"


@dataclass
class Outage:
    service: str
    since: float
    retries: int = 0


@transaction.atomic
def apply_event(*, consumer: str, event: Event) -> str:
    """Apply one event for one consumer, once: PROCESSED, DUPLICATE (applied
    before) or IGNORED (no handler for this event type)."""
    handler = HANDLERS.get(consumer, {}).get(event.event_type)
    if handler is None:
        return IGNORED  # nothing to remember either
    seen = ProcessedEvent(consumer=consumer, event_id=event.event_id, event_type=event.event_type)
    if insert_unless_exists(seen, conflict_fields=["consumer", "event_id"]) is None:
        return DUPLICATE
    handler(event)
    return PROCESSED


class PartitionEnds:
    """Notices an assigned partition whose end fell below this member's position
    (its current offset, else its committed one): the broker lost its log (came
    back empty) and the member would wait there, then skip the new log's first
    messages. Such a partition is read again from its start (a WARNING each
    time): at-least-once processing finds what it had done.

    The end is the high watermark of the member's own fetches (cached, no round
    trip): the development broker's listed one (ListOffsets) counts a batch of
    messages as one, so a fresh query would see most partitions "shrunk". A
    position needs a round trip only while nothing was read since the
    assignment (the committed offset), and `check` runs at most every
    END_CHECK_SECONDS, from an idle poll: a member past the end reads nothing.
    A log that grew past the old position before the check is not noticed:
    the stale-queue sweeper re-sends queued checkouts it lost (docs/architecture.md)."""

    def __init__(self, group: GroupConsumer, *, every: float = END_CHECK_SECONDS) -> None:
        self.group, self.every = group, every
        self.rereads = 0
        self._next = 0.0

    def check(self) -> list[TopicPartition]:
        """The partitions sent back to their start now (none between two checks)."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self.every
        consumer = self.group.consumer
        try:
            assigned = consumer.assignment()
            positions = consumer.position(assigned) if assigned else []
            unread = [tp for tp in positions if tp.offset < 0]
            committed = consumer.committed(unread, timeout=5) if unread else []
        except KafkaException as error:  # a rebalance or an outage: the next check sees
            logger.debug("%s: partition ends not checked: %r", self.group.name, error)
            return []
        committed_at = {(tp.topic, tp.partition): tp.offset for tp in committed}
        reread = []
        for tp in positions:
            position = tp.offset if tp.offset >= 0 else committed_at.get((tp.topic, tp.partition), -1)
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
            if position < 0 or high < 0 or high >= position:
                continue
            start = TopicPartition(tp.topic, tp.partition, max(low, 0))
            logger.warning(
                "%s: partition %s[%s] ends at %s, below this consumer's position %s (the broker lost its log?): "
                "reading it again from offset %s",
                self.group.name,
                tp.topic,
                tp.partition,
                high,
                position,
                start.offset,
            )
            consumer.seek(start)
            reread.append(start)
        self.rereads += len(reread)
        return reread


class EventConsumer(GroupConsumer):
    def __init__(self, *, name: str, topic: str | None = None, max_attempts: int | None = None) -> None:
        if name not in HANDLERS:
            raise ValueError(f"unknown consumer {name!r}; known: {', '.join(sorted(HANDLERS))}")
        # The broker otherwise holds a fetch up to 500 ms waiting for more data.
        super().__init__(name=name, topic=topic or settings.KAFKA_ORDERS_TOPIC, **{"fetch.wait.max.ms": 50})
        self.max_attempts = max_attempts or settings.CONSUMER_MAX_ATTEMPTS
        self._dlq_producer: Producer | None = None
        self.processed = self.duplicates = self.dead_lettered = 0
        self.outage: Outage | None = None  # the service this consumer waits for, if any
        # The kept message's own failures, so that an outage between two of them does not reset the count.
        self._failures: tuple[tuple[str, int, int] | None, int] = (None, 0)
        self.ends = PartitionEnds(self)
        CONSUMER_WAITING.labels(name).set(0)

    def apply(self, message: Message) -> bool:
        """Apply one message (retrying, then dead-lettering); its offset is left to the caller.
        False when a service it needs is down: the message is not applied and must be read again."""
        headers = dict(message.headers() or [])
        token = request_id_var.set((headers.get("request_id") or b"").decode(errors="replace"))
        try:
            return self._apply_with_retries(message)
        finally:
            request_id_var.reset(token)

    def _apply_with_retries(self, message: Message) -> bool:
        position = (message.topic(), message.partition(), message.offset())
        # Failures of the handler itself: only these lead to the dead-letter topic.
        failures = self._failures[1] if self._failures[0] == position else 0
        self._failures = (None, 0)
        while True:
            try:
                result = apply_event(consumer=self.name, event=parse_event(message.value()))
            except Exception as exc:
                service = failed_service(exc)
                if service is not None:
                    self._failures = (position, failures)
                    self._wait_for(service, exc, message)
                    return False
                failures += 1
                logger.warning("%s: attempt %d failed at offset %s: %r", self.name, failures, message.offset(), exc)
                if failures >= self.max_attempts:
                    self._dead_letter(message, exc)
                    CONSUMER_EVENTS.labels(self.name, "dead_lettered").inc()
                    self._resume(message)
                    return True
                time.sleep(backoff_seconds(failures, first=0.1, cap=1.0))
                close_old_connections()  # the failure may have broken the connection
            else:
                self._resume(message)
                CONSUMER_EVENTS.labels(self.name, result).inc()
                if result == PROCESSED:
                    self.processed += 1
                    logger.info("%s: applied offset %s", self.name, message.offset())
                elif result == DUPLICATE:
                    self.duplicates += 1
                return True

    def _wait_for(self, service: str, error: Exception, message: Message) -> None:
        """Enter (or stay in) the state of waiting for `service`: one log line per state, not per retry."""
        if self.outage is None or self.outage.service != service:
            logger.warning(
                "%s: waiting for the %s: %r at offset %s; the message is kept and retried until it answers",
                self.name,
                service,
                error,
                message.offset(),
            )
            self.outage = Outage(service=service, since=time.monotonic())
            CONSUMER_WAITING.labels(self.name).set(1)
        self.outage.retries += 1
        if service == "database":
            # The retry connects afresh rather than reuse a connection the outage may
            # have broken (outside a request nothing else would close it first).
            for connection in connections.all(initialized_only=True):
                connection.close()

    def _resume(self, message: Message) -> None:
        if self.outage is not None:
            logger.info(
                "%s: the %s is back after %.1f s and %d retries; resumed at offset %s",
                self.name,
                self.outage.service,
                time.monotonic() - self.outage.since,
                self.outage.retries,
                message.offset(),
            )
            self.outage = None
            CONSUMER_WAITING.labels(self.name).set(0)

    def _back_off(self, should_stop: Callable[[], bool]) -> None:
        """Wait before retrying the kept message: doubling, capped, cut short by SIGTERM."""
        delay = backoff_seconds(
            self.outage.retries, first=FIRST_BACKOFF_SECONDS, cap=settings.CONSUMER_MAX_BACKOFF_SECONDS
        )
        until = time.monotonic() + delay
        while not should_stop() and time.monotonic() < until:
            time.sleep(min(STOP_CHECK_SECONDS, max(until - time.monotonic(), 0)))

    def _dead_letter(self, message: Message, error: Exception) -> None:
        if self._dlq_producer is None:
            self._dlq_producer = Producer(
                # The DLQ topic is created with the others; a producer must not create it with other settings.
                client_config(**{"enable.idempotence": True, "acks": "all", "allow.auto.create.topics": False})
            )
        headers = list(message.headers() or []) + [
            ("error", f"{type(error).__name__}: {error}"[:1000].encode()),
            ("consumer", self.name.encode()),
            ("source_offset", str(message.offset()).encode()),
        ]
        self._dlq_producer.produce(
            dead_letter_topic(self.topic), key=message.key(), value=message.value(), headers=headers
        )
        if self._dlq_producer.flush(10):
            raise RuntimeError("could not write to the dead-letter topic; not committing the offset")
        self.dead_lettered += 1
        logger.error("%s: offset %s sent to %s: %r", self.name, message.offset(), dead_letter_topic(self.topic), error)

    def run(self, *, should_stop: Callable[[], bool], max_idle_seconds: float | None = None) -> None:
        idle_since = time.monotonic()
        try:
            while not should_stop():
                first = self.consumer.poll(0.5)
                if first is None:
                    self.ends.check()
                    if max_idle_seconds is not None and time.monotonic() - idle_since > max_idle_seconds:
                        return
                    continue
                # What else has arrived already: no waiting for a batch to fill.
                messages = [first, *self.consumer.consume(MAX_BATCH - 1, timeout=0)]
                close_old_connections()  # once a batch, not a health check per message
                self._apply_batch(messages, should_stop)
                idle_since = time.monotonic()
                if self.outage is not None:
                    # The kept message was rewound: polling again (not sleeping on it
                    # here) keeps the group membership and sees rebalances.
                    self._back_off(should_stop)
        finally:
            self.close()

    def _apply_batch(self, messages: list[Message], should_stop: Callable[[], bool]) -> None:
        applied, deadline = [], time.monotonic() + MAX_BATCH_SECONDS
        try:
            for index, message in enumerate(messages):
                if message.error():
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        logger.warning("%s: %s", self.name, message.error())
                    continue
                if not self.apply(message):
                    self.rewind(messages[index:])  # a service is down: this one and the rest come again
                    break
                applied.append(message)
                if should_stop():
                    break  # SIGTERM: the current message is done; the rest come again after a restart
                if time.monotonic() > deadline:
                    self.rewind(messages[index + 1 :])
                    break
        finally:
            self.commit(applied)

    def close(self) -> None:
        self.consumer.close()  # commits nothing more: every applied offset was committed synchronously
        if self._dlq_producer is not None:
            self._dlq_producer.flush(5)
