"""Our Kafka topics, created explicitly with their partition counts before any
producer may touch them: a broker that auto-creates topics would pick its own
count (the dev broker picks 4), and our producers never auto-create."""

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic
from django.conf import settings

from core.kafka import admin_client, dead_letter_topic, shop_topics, topic_warnings

__all__ = ["TopicReport", "dead_letter_topic", "ensure_topics"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicReport:
    name: str
    created: bool
    partitions: int


def ensure_topics(*, topics: list[str] | None = None, timeout: float = 10.0) -> list[TopicReport]:
    """Create the topics that are missing, then check every partition count:
    a topic with another count is logged as an error (it is not changed: only an
    operator can decide to, see docs/operations.md)."""
    topics = topics or shop_topics()
    admin = admin_client()
    existing = set(admin.list_topics(timeout=timeout).topics)
    missing = [name for name in topics if name not in existing]
    created = set()
    if missing:
        futures = admin.create_topics(
            [NewTopic(name, settings.KAFKA_TOPIC_PARTITIONS, settings.KAFKA_REPLICATION_FACTOR) for name in missing],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
                created.add(name)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        if created:
            logger.info("created Kafka topics %s", sorted(created))
    metadata = admin.list_topics(timeout=timeout)
    for warning in topic_warnings(metadata, topics):
        logger.error("%s", warning)
    return [
        TopicReport(name, name in created, len(metadata.topics[name].partitions) if name in metadata.topics else 0)
        for name in topics
    ]
