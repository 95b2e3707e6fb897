"""The queue's Kafka producer as the request path uses it.

A queue checkout is a 202 only once the broker acknowledged the request
(acks=all), so a web thread waits for the broker. Three things keep that wait
from hurting the rest of the shop:

- every send is bounded: librdkafka reports each message within
  QUEUE_ADMIT_TIMEOUT_MS (message.timeout.ms), and the thread waits at most
  one timer scan (a second) longer;
- a failed send retires its producer: the next send builds a new one, so an
  error the producer cannot recover from (a broker restarted without our
  producer id: UnknownProducerId, fatal for an idempotent producer) costs
  one 503, not every queue checkout until the process is replaced;
- a circuit breaker: the first failure (or librdkafka saying that all brokers
  are down) opens it, and while it is open a queue checkout is refused at once
  without touching Kafka. After QUEUE_BREAKER_OPEN_SECONDS one request is let
  through as a trial; its success closes the breaker, its failure opens it again.

The breaker is per process and small on purpose: it opens on librdkafka's own
broker-state callback as well as on failed sends, which the circuit-breaker
libraries (wrapping one call) have no hook for.
"""

import logging
import threading
import time

from confluent_kafka import KafkaError, KafkaException, Producer
from django.conf import settings

from core.kafka import client_config
from orders.exceptions import QueueUnavailable
from orders.metrics import QUEUE_UNAVAILABLE

logger = logging.getLogger(__name__)

REPORT_GRACE_SECONDS = 1.0  # librdkafka scans for timed-out messages once a second


class Breaker:
    """Closed: every call passes. Open: none until `open_seconds` passed, then
    one trial at a time until a trial succeeds."""

    def __init__(self, *, open_seconds: float) -> None:
        self.open_seconds = open_seconds
        self._lock = threading.Lock()
        self._opened_at: float | None = None
        self._trial = False

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def refusing(self) -> bool:
        """Would allow() refuse now? (Takes no trial.)"""
        with self._lock:
            opened_at = self._opened_at
            return opened_at is not None and (self._trial or time.monotonic() - opened_at < self.open_seconds)

    def allow(self) -> bool:
        with self._lock:
            if self._opened_at is None:
                return True
            if self._trial or time.monotonic() - self._opened_at < self.open_seconds:
                return False
            self._trial = True
            return True

    def succeeded(self) -> None:
        with self._lock:
            if self._opened_at is not None:
                logger.info("queue broker answers again: queue checkouts resume")
            self._opened_at, self._trial = None, False

    def failed(self) -> None:
        with self._lock:
            if self._opened_at is None:
                logger.warning("queue broker unavailable: queue checkouts refused for %.1f s", self.open_seconds)
            self._opened_at, self._trial = time.monotonic(), False


class QueueProducer:
    def __init__(self) -> None:
        self.breaker = Breaker(open_seconds=settings.QUEUE_BREAKER_OPEN_SECONDS)
        self._lock = threading.Lock()
        self._client: _Client | None = None

    def refuse_early(self) -> None:
        """QueueUnavailable at once while the breaker is open: before the request
        writes anything anywhere."""
        if self.breaker.refusing():
            QUEUE_UNAVAILABLE.labels("breaker_open").inc()
            raise QueueUnavailable()

    def send(self, *, topic: str, key: str, value: bytes) -> None:
        """Return once the broker acknowledged the message; QueueUnavailable if
        it did not within the bound, or the breaker is open."""
        if not self.breaker.allow():
            QUEUE_UNAVAILABLE.labels("breaker_open").inc()
            raise QueueUnavailable()
        client = None
        try:
            client = self._current()
            client.send(topic=topic, key=key, value=value)
        except BaseException as error:
            self._retire(client)
            self.breaker.failed()
            QUEUE_UNAVAILABLE.labels("broker_error").inc()
            if isinstance(error, QueueUnavailable | KafkaException | BufferError):
                raise QueueUnavailable() from error
            raise
        self.breaker.succeeded()

    def warm(self) -> None:
        """Connect before the first queue checkout needs it: a new producer's first
        message waited half a second for librdkafka to set up its idempotent
        session, and every checkout a worker took meanwhile waited with it
        (bench/flash_sale.py --mode queue: the sale's first second). Best
        effort: a broker that does not answer is the breaker's business later."""
        try:
            self._current().producer.list_topics(settings.KAFKA_CHECKOUT_TOPIC, timeout=5)
        except Exception as error:  # noqa: BLE001 - logged; the first checkout connects instead
            logger.info("queue producer not warmed: %r", error)

    def _current(self) -> "_Client":
        with self._lock:
            if self._client is None:
                self._client = _Client(on_down=self.breaker.failed)
            return self._client

    def _retire(self, client: "_Client | None") -> None:
        """The next send builds a new producer; threads still waiting on this one keep it."""
        with self._lock:
            if client is not None and self._client is client:
                self._client = None


class _Client:
    """One librdkafka producer, and whether it has reported all brokers down."""

    def __init__(self, *, on_down) -> None:
        self._on_down = on_down
        self.brokers_down = threading.Event()
        self.producer = Producer(
            client_config(
                **{
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    "message.timeout.ms": settings.QUEUE_ADMIT_TIMEOUT_MS,
                    "allow.auto.create.topics": False,
                    "error_cb": self._on_error,
                }
            )
        )

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal() or error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.brokers_down.set()
            self._on_down()

    def send(self, *, topic: str, key: str, value: bytes) -> None:
        delivered = threading.Event()
        outcome: list[KafkaError | None] = []

        def report(error: KafkaError | None, message) -> None:
            outcome.append(error)
            delivered.set()

        self.producer.produce(topic, key=key, value=value, on_delivery=report)
        deadline = time.monotonic() + settings.QUEUE_ADMIT_TIMEOUT_MS / 1000 + REPORT_GRACE_SECONDS
        while not delivered.is_set() and time.monotonic() < deadline:
            self.producer.poll(0.005)  # serves every thread's reports: each sets its own event
            if self.brokers_down.is_set():
                # No broker to send to: what waits in librdkafka's queue was never sent, so it
                # fails now (reported as purged) instead of at the timeout. In-flight messages
                # are left to their reports: the broker may have them.
                self.producer.purge(in_queue=True, in_flight=False, blocking=False)
        if not delivered.is_set():
            raise QueueUnavailable()
        if outcome[0] is not None:
            raise KafkaException(outcome[0])


_queue_producer: QueueProducer | None = None
_queue_producer_lock = threading.Lock()


def queue_producer() -> QueueProducer:
    """The process's queue producer (one per process: its breaker is what the
    process knows of the broker)."""
    global _queue_producer
    with _queue_producer_lock:
        if _queue_producer is None:
            _queue_producer = QueueProducer()
        return _queue_producer


def warm_queue_producer_in_background() -> None:
    """For a web process at start (config/wsgi.py): the queue's producer connects
    in a daemon thread while the process starts serving."""
    threading.Thread(target=lambda: queue_producer().warm(), name="queue-producer-warm", daemon=True).start()


def forget_queue_producer() -> None:
    """A new producer and a closed breaker on next use (settings changed: tests)."""
    global _queue_producer
    with _queue_producer_lock:
        _queue_producer = None
