"""confluent-kafka clients configured from settings, with librdkafka's logs
routed into Python logging instead of stderr."""

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata
from django.conf import settings

logger = logging.getLogger("shop.kafka")


def client_config(**overrides) -> dict:
    return {"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "logger": logger, **overrides}


def admin_client(**overrides) -> AdminClient:
    return AdminClient(client_config(**overrides))


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.dlq"


def shop_topics() -> list[str]:
    """The topics the shop writes: each created explicitly with KAFKA_TOPIC_PARTITIONS
    partitions (a producer left to auto-create one would get the broker's default)."""
    return [settings.KAFKA_ORDERS_TOPIC, dead_letter_topic(settings.KAFKA_ORDERS_TOPIC)]


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
                "(KAFKA_TOPIC_PARTITIONS): see the README's runbook on partition counts"
            )
    return warnings


def ping_kafka(*, timeout: float) -> ClusterMetadata:
    """The cluster's metadata; KafkaException unless a broker answers in time."""
    admin = admin_client(**{"socket.connection.setup.timeout.ms": max(int(timeout * 1000), 1000)})
    metadata = admin.list_topics(timeout=timeout)
    if not metadata.brokers:
        raise KafkaException("no broker in metadata")
    return metadata
