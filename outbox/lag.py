"""How far behind each consumer group is."""

from confluent_kafka import Consumer, TopicPartition
from django.conf import settings

from core.kafka import client_config, consumer_group
from outbox.consumers import HANDLERS


def consumer_positions(*, extra: dict[str, str] | None = None, timeout: float = 5.0) -> dict[str, dict]:
    """Committed offsets of each event consumer's group (and of `extra` groups,
    name -> topic) against the partitions' ends.
    (The dev broker reports end offsets loosely; real Kafka is exact.)"""
    groups = {name: settings.KAFKA_ORDERS_TOPIC for name in sorted(HANDLERS)} | (extra or {})
    positions, unreachable = {}, None
    for name, topic in groups.items():
        if unreachable is not None:  # the broker did not answer the last group: it would not answer this one
            positions[name] = {"error": unreachable}
            continue
        consumer = Consumer(client_config(**{"group.id": consumer_group(name), "enable.auto.commit": False}))
        try:
            try:
                metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            except Exception as error:
                unreachable = str(error)[:200]
                raise
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
