"""confluent-kafka clients configured from settings, with librdkafka's logs
routed into Python logging instead of stderr."""

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from django.conf import settings

logger = logging.getLogger("shop.kafka")


def client_config(**overrides) -> dict:
    return {"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "logger": logger, **overrides}


def admin_client(**overrides) -> AdminClient:
    return AdminClient(client_config(**overrides))


def ping_kafka(*, timeout: float) -> None:
    """Raise KafkaException unless a broker answers a metadata request in time."""
    admin = admin_client(**{"socket.connection.setup.timeout.ms": max(int(timeout * 1000), 1000)})
    metadata = admin.list_topics(timeout=timeout)
    if not metadata.brokers:
        raise KafkaException("no broker in metadata")
