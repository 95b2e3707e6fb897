"""confluent-kafka clients configured from settings, with librdkafka's logs
routed into Python logging instead of stderr."""

import json
import logging
import re
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata
from django.conf import settings

logger = logging.getLogger("shop.kafka")

# librdkafka's log buffer: "[thrd:NAME]: NAME: text", the name being a broker
# ("host:port/id", "sasl_ssl://host:port/bootstrap") or "GroupCoordinator: host:port".
_BROKER = re.compile(r"^\[thrd:[^\]]*\]: (?:\w+Coordinator: )?(?:\w+://)?(?P<address>[^\s/]+)(?:/\S*)?: ")


@dataclass
class _Unreachable:
    since: float
    last: float
    repeats: int = 0


class BrokerFailureFilter(logging.Filter):
    """One line when a client cannot reach a broker, one when it can again.

    librdkafka logs each failed connect at ERROR, and a consumer's coordinator
    lookup retries its bootstrap broker every ~50 ms regardless of
    reconnect.backoff.ms: 20 lines a second per consumer while Kafka is down.
    The first failure per client and broker address passes; repeats are dropped
    until the client's statistics show that address up again (clients that are
    polled all the time send them, see `recovery_statistics`), or, for clients
    without statistics, until no failure came for QUIET_SECONDS.
    """

    QUIET_SECONDS = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._unreachable: dict[tuple[str, str], _Unreachable] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = _failure_key(record)
        if key is None:
            return True
        now = time.monotonic()
        with self._lock:
            state = self._unreachable.get(key)
            if state is not None and now - state.last < self.QUIET_SECONDS:
                state.last, state.repeats = now, state.repeats + 1
                return False
            self._forget_quiet(now)
            self._unreachable[key] = _Unreachable(since=now, last=now)
        fac, client, text = record.args
        record.args = (fac, client, f"{text} (repeats are not logged until the broker is reachable again)")
        return True

    def observe_statistics(self, stats_json: str) -> None:
        """A client's statistics (stats_cb): log the brokers it reaches again."""
        stats = json.loads(stats_json)
        client = stats.get("name", "")
        up = {broker.get("nodename") for broker in stats.get("brokers", {}).values() if broker.get("state") == "UP"}
        with self._lock:
            back = {key: state for key, state in self._unreachable.items() if key[0] == client and key[1] in up}
            for key in back:
                del self._unreachable[key]
        for (client, address), state in back.items():
            logger.info(
                "%s: Kafka broker %s reachable again after %.1f s (%d failed connects not logged)",
                client,
                address,
                time.monotonic() - state.since,
                state.repeats,
            )

    def _forget_quiet(self, now: float) -> None:
        # Clients closed while failing (short-lived admin clients) leave their entry behind.
        for key in [k for k, state in self._unreachable.items() if now - state.last >= self.QUIET_SECONDS]:
            del self._unreachable[key]


def _failure_key(record: logging.LogRecord) -> tuple[str, str] | None:
    """(client, broker address) for librdkafka's "broker connection failed" lines, else None."""
    if record.levelno < logging.WARNING or not isinstance(record.args, tuple) or len(record.args) != 3:
        return None
    fac, client, text = record.args
    if fac != "FAIL":  # a broker connection failure: refused, reset, unresolvable, TLS or auth failed
        return None
    match = _BROKER.match(str(text))
    return str(client), match["address"] if match else str(text).partition("]")[0]


broker_failures = BrokerFailureFilter()
logger.addFilter(broker_failures)


def recovery_statistics() -> dict:
    """Config for a client polled all the time (a consumer): its statistics, served
    by poll(), tell the log filter when a broker is back. A client that is not
    polled would pile them up in memory, so producers do not get this."""
    return {"statistics.interval.ms": 2000, "stats_cb": broker_failures.observe_statistics}


def client_config(**overrides) -> dict:
    return {"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "logger": logger, **overrides}


def group_timeouts() -> dict:
    """A consumer group member's session: its first assignment waits about half
    of KAFKA_SESSION_TIMEOUT_MS (3 s at the default), and a member that stops
    heartbeating is replaced after it. Heartbeats come from librdkafka's own
    thread, so a long batch does not count against it."""
    timeout = settings.KAFKA_SESSION_TIMEOUT_MS
    return {"session.timeout.ms": timeout, "heartbeat.interval.ms": max(timeout // 3, 100)}


def consumer_group(name: str) -> str:
    """The Kafka group id of the shop's consumer `name` (one per effect, and the queue's writer)."""
    return f"{settings.KAFKA_CONSUMER_GROUP_PREFIX}{name}"


class GroupConsumer:
    """A member of the group `name` on `topic` that commits offsets itself, only
    after what it read is processed: a crash before the commit delivers those
    messages again (at least once), and so does `rewind` when processing could
    not finish (an outage: the same messages are read again after a backoff)."""

    def __init__(self, *, name: str, topic: str, **config) -> None:
        self.name, self.topic = name, topic
        self.consumer = Consumer(
            client_config(
                **recovery_statistics(),
                **{
                    "group.id": consumer_group(name),
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    **group_timeouts(),
                    **config,
                },
            )
        )
        self.consumer.subscribe([topic])

    def commit(self, messages: list[Message]) -> None:
        """Commit the offsets after `messages`, every one of them processed. A failed
        commit (a rebalance in progress) is logged: those messages come again, here
        or to another member, and are found done."""
        if not messages:
            return
        after = {(m.topic(), m.partition()): m.offset() + 1 for m in messages}
        offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in after.items()]
        try:
            failed = [tp for tp in self.consumer.commit(offsets=offsets, asynchronous=False) if tp.error]
        except KafkaException as error:
            failed = [error]
        if failed:
            logging.getLogger(__name__).warning("%s: offsets not committed: %s", self.name, failed)

    def rewind(self, messages: list[Message]) -> None:
        """Have `messages`, taken from the client but not processed, read again."""
        first: dict[tuple[str, int], int] = {}
        for message in messages:
            if not message.error():
                first.setdefault((message.topic(), message.partition()), message.offset())
        for (topic, partition), offset in first.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))


def admin_client(**overrides) -> AdminClient:
    return AdminClient(client_config(**overrides))


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.dlq"


def shop_topics() -> list[str]:
    """The topics the shop writes: each created explicitly with KAFKA_TOPIC_PARTITIONS
    partitions (a producer left to auto-create one would get the broker's default)."""
    return [
        settings.KAFKA_ORDERS_TOPIC,
        dead_letter_topic(settings.KAFKA_ORDERS_TOPIC),
        settings.KAFKA_CHECKOUT_TOPIC,
    ]


def topic_warnings(metadata: ClusterMetadata, topics: list[str]) -> list[str]:
    """What is wrong with our topics in this metadata, in words for an operator."""
    expected, warnings = settings.KAFKA_TOPIC_PARTITIONS, []
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            warnings.append(f"topic {name} is missing (the relay and `manage.py kafka_topics` create it)")
        elif len(topic.partitions) != expected:
            warnings.append(
                f"topic {name} has {len(topic.partitions)} partitions, expected {expected} "
                "(KAFKA_TOPIC_PARTITIONS): see docs/operations.md, partition counts"
            )
    return warnings


_probe_admins: dict[str, AdminClient] = {}  # by bootstrap servers: one client per process, not per probe


def ping_kafka(*, timeout: float) -> ClusterMetadata:
    """The cluster's metadata; KafkaException unless a broker answers in time."""
    bootstrap = settings.KAFKA_BOOTSTRAP_SERVERS
    admin = _probe_admins.get(bootstrap)
    if admin is None:
        admin = _probe_admins[bootstrap] = admin_client(
            **{"socket.connection.setup.timeout.ms": max(int(timeout * 1000), 1000)}
        )
    metadata = admin.list_topics(timeout=timeout)
    if not metadata.brokers:
        raise KafkaException("no broker in metadata")
    return metadata


def read_to_end(consumer: Consumer, starts: list[TopicPartition], *, timeout: float) -> list[Message]:
    """Every message from `starts` to the end of its partition, duplicates
    included, by a consumer made with `enable.partition.eof`: the end a fetch
    reaches, not a listed high watermark (a broker's need not count messages:
    the dev broker's do not). KafkaException when nothing arrives for `timeout`
    seconds before every partition ended."""
    messages: list[Message] = []
    if not starts:
        return messages
    consumer.assign(starts)
    reading = {start.partition for start in starts}
    deadline = time.monotonic() + timeout
    while reading:
        batch = consumer.consume(1000, timeout=0.5)
        if batch:
            deadline = time.monotonic() + timeout
        elif time.monotonic() > deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"partitions {sorted(reading)} not read to the end"))
        for message in batch:
            error = message.error()
            if error is None:
                messages.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                reading.discard(message.partition())
            else:
                raise KafkaException(error)
    return messages
