"""Our Kafka topics, created explicitly with their partition counts (a broker
that auto-creates topics would pick its own)."""

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic
from django.conf import settings

from config.kafka import admin_client

logger = logging.getLogger(__name__)


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.dlq"


def ensure_topics(*, topics: list[str] | None = None, timeout: float = 10.0) -> list[str]:
    """Create the topics that are missing; return the names created."""
    topics = topics or [settings.KAFKA_ORDERS_TOPIC, dead_letter_topic(settings.KAFKA_ORDERS_TOPIC)]
    admin = admin_client()
    existing = set(admin.list_topics(timeout=timeout).topics)
    missing = [name for name in topics if name not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(name, settings.KAFKA_TOPIC_PARTITIONS, settings.KAFKA_REPLICATION_FACTOR)
            for name in missing
        ],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    if created:
        logger.info("created Kafka topics %s", created)
    return created
