"""The queue's writer: reads admitted checkouts from KAFKA_CHECKOUT_TOPIC and
writes them in batches (orders/services/queue_writing.py write_batch), then commits the
offsets. Several may run: the topic's partitions share the work.

The offsets are committed only after the batch's transaction and its clean-up
in Redis: a crash in between delivers the batch again, and write_batch finds
those orders written and cleans up after them (once per request). The clean-up
runs on a thread of its own while the next batch is written (Redis calls and
database statements overlap: bench/README.md, "Figures behind code choices"),
and the batch's offsets are committed once it is done.
A database, Redis or network outage keeps the batch and retries it (capped
backoff); a message that is not a checkout request is logged and skipped.
While idle, the writer reads again from its start a partition whose end fell
below its position (the broker came back with an empty log: outbox/consumers.py
PartitionEnds); the requests it finds written change nothing. A broker that came
back without the topic at all gets it again from the writer (TopicKeeper): the
checkouts' producers may not create it (ours has KAFKA_TOPIC_PARTITIONS), and
answer 503 queue_unavailable until it exists."""

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import Message
from django.conf import settings
from django.db import close_old_connections

from core.backoff import backoff_seconds
from core.kafka import GroupConsumer
from core.outages import failed_service
from orders.services.queue_admission import QueuedRequest
from orders.services.queue_writing import WrittenBatch, finish_written_batch, write_batch
from outbox.consumers import END_CHECK_SECONDS, PartitionEnds
from outbox.topics import ensure_topics

logger = logging.getLogger(__name__)

WRITER_GROUP = "order-writer"


class QueueWriter(GroupConsumer):
    def __init__(self) -> None:
        super().__init__(
            name=WRITER_GROUP,
            topic=settings.KAFKA_CHECKOUT_TOPIC,
            # A batch waits QUEUE_BATCH_WAIT_MS at most, so must the broker's fetch.
            **{"allow.auto.create.topics": False, "fetch.wait.max.ms": settings.QUEUE_BATCH_WAIT_MS},
        )
        self.written = self.rejected = self.batches = self.skipped = 0
        self._cleaner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="order-writer-clean-up")
        # The last batch written: its clean-up, and its messages (offsets committed once it is done).
        self._cleaning: tuple[Future, list[Message]] | None = None
        self.ends = PartitionEnds(self)
        self.topic_keeper = TopicKeeper(self)

    def run(self, *, should_stop: Callable[[], bool]) -> None:
        failures = 0
        try:
            while not should_stop():
                try:
                    self.run_once()
                    failures = 0
                except Exception as error:
                    service = failed_service(error)
                    if service is None:
                        raise
                    failures += 1
                    wait = backoff_seconds(failures, first=0.1, cap=settings.CONSUMER_MAX_BACKOFF_SECONDS)
                    logger.warning("order writer: %s unavailable (%r); retrying in %.1f s", service, error, wait)
                    close_old_connections()
                    time.sleep(wait)
        finally:
            try:
                self.settle()
            except Exception as error:  # the batch comes again on the next start and is found written
                logger.warning("order writer: the last batch's clean-up failed on stop (%r)", error)
            self.close()

    def close(self) -> None:
        self._cleaner.shutdown()
        self.consumer.close()

    def run_once(self) -> int:
        """Write what arrived within QUEUE_BATCH_WAIT_MS (at most QUEUE_BATCH_SIZE);
        returns how many requests were in the batch."""
        messages = self.consumer.consume(
            num_messages=settings.QUEUE_BATCH_SIZE, timeout=settings.QUEUE_BATCH_WAIT_MS / 1000
        )
        messages = [message for message in messages if not message.error()]
        if not messages:
            self.settle()  # first: the last batch's offsets are committed before any seek
            self.ends.check()
            self.topic_keeper.check()
            return 0
        requests = []
        for message in messages:
            try:
                requests.append(QueuedRequest.from_json(message.value()))
            except (ValueError, TypeError, KeyError) as error:
                logger.error("order writer: skipping a message that is not a checkout request: %r", error)
        try:
            results = self._write(requests)
        except Exception:
            self.rewind(messages)
            raise
        self.settle(also_rewinding=messages)
        self._cleaning = (self._cleaner.submit(self._clean_up_after, results), messages)
        self.batches += 1
        for result in results:
            self.written += len(result.written)
            self.rejected += len(result.rejected)
        return len(messages)

    def settle(self, *, also_rewinding: list[Message] = ()) -> None:
        """Wait for the last batch's clean-up and commit its offsets. When the
        clean-up failed (Redis went away), both that batch and the one written
        since (`also_rewinding`) come again: they are found written, and
        cleaned up then."""
        if self._cleaning is None:
            return
        (cleaning, messages), self._cleaning = self._cleaning, None
        try:
            cleaning.result()
        except Exception:
            self.rewind(messages + list(also_rewinding))
            raise
        self.commit(messages)

    @staticmethod
    def _clean_up_after(results: list[WrittenBatch]) -> None:
        for result in results:
            finish_written_batch(result)

    def _write(self, requests: list[QueuedRequest]) -> list:
        """The batch in one transaction; if it fails for a reason of its own (not
        an outage), request by request, so that one bad request (its customer
        deleted meanwhile) cannot hold the queue: that one is logged with all it
        holds, for an operator, and skipped."""
        if not requests:
            return []
        try:
            return [write_batch(requests, clean_up_on_commit=False)]
        except Exception as error:
            if failed_service(error) is not None:
                raise
            logger.warning("order writer: batch of %s failed (%r); writing one by one", len(requests), error)
        results = []
        for request in requests:
            try:
                results.append(write_batch([request], clean_up_on_commit=False))
            except Exception as error:
                if failed_service(error) is not None:
                    raise
                self.skipped += 1
                logger.error(
                    "order writer: cannot write queued order %s (%r): %s",
                    request.order_id,
                    error,
                    request.to_json().decode(),
                )
        return results


class TopicKeeper:
    """Creates the writer's topic again when the broker lost it, at most every
    END_CHECK_SECONDS, from an idle poll (one metadata request on the consumer's
    own connection)."""

    def __init__(self, group: GroupConsumer, *, every: float = END_CHECK_SECONDS) -> None:
        self.group, self.every = group, every
        self.recreated = 0
        self._next = 0.0

    def check(self) -> bool:
        """True when the topic was missing and is created now."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every
        topic = self.group.topic
        try:
            found = self.group.consumer.list_topics(topic, timeout=2).topics.get(topic)
            if found is not None and found.error is None:
                return False
            logger.warning("%s: topic %s is gone (the broker lost its log?): creating it again", self.group.name, topic)
            ensure_topics(topics=[topic], timeout=5)
        except Exception as error:  # noqa: BLE001 - an outage: the next check tries again
            logger.info("%s: topic %s not checked: %r", self.group.name, topic, error)
            return False
        self.recreated += 1
        return True
