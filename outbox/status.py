"""What `manage.py shop_status` shows: read-only figures from PostgreSQL, Redis and Kafka."""

from datetime import timedelta

from confluent_kafka import Consumer, TopicPartition
from django.conf import settings
from django.utils import timezone

from config.kafka import client_config
from inventory.services.flash_sales import flash_sale_status
from orders.models import Order, OrderStatus
from outbox.consumers import HANDLERS
from outbox.services import backlog


def consumer_positions(*, timeout: float = 5.0) -> dict[str, dict]:
    """Committed offsets of each consumer group against the partitions' ends.
    (The dev broker reports end offsets loosely; real Kafka is exact.)"""
    topic = settings.KAFKA_ORDERS_TOPIC
    positions = {}
    for name in sorted(HANDLERS):
        group = f"{settings.KAFKA_CONSUMER_GROUP_PREFIX}{name}"
        consumer = Consumer(client_config(**{"group.id": group, "enable.auto.commit": False}))
        try:
            metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            partitions = [TopicPartition(topic, p) for p in (metadata.partitions if metadata else {})]
            committed = consumer.committed(partitions, timeout=timeout) if partitions else []
            done = end = 0
            for partition in committed:
                low, high = consumer.get_watermark_offsets(partition, timeout=timeout)
                end += high
                done += partition.offset if partition.offset >= 0 else low
            positions[name] = {"committed": done, "end": end, "lag": max(end - done, 0)}
        except Exception as error:  # Kafka down: say so, show the rest
            positions[name] = {"error": str(error)[:200]}
        finally:
            consumer.close()
    return positions


def shop_status() -> dict:
    now = timezone.now()
    pending = Order.objects.filter(status=OrderStatus.PENDING_PAYMENT)
    waiting, oldest = backlog()
    try:
        sales = flash_sale_status()
    except Exception:
        sales = []
    return {
        "pending_orders": pending.count(),
        "expiring_soon": pending.filter(expires_at__lte=now + timedelta(minutes=1)).count(),
        "outbox_backlog": waiting,
        "outbox_oldest_age_seconds": (now - oldest).total_seconds() if oldest else None,
        "consumers": consumer_positions(),
        "flash_sales": sales,
    }
