import itertools
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from core.kafka import client_config, read_to_end
from outbox.consumers import EventConsumer
from outbox.topics import dead_letter_topic, ensure_topics

_topics = itertools.count()


@pytest.fixture
def kafka_topic(settings, run_id):
    """A fresh topic (and dead-letter topic) and consumer-group prefix for this test."""
    topic = f"test.{run_id}.{next(_topics)}"
    settings.KAFKA_ORDERS_TOPIC = topic
    settings.KAFKA_CONSUMER_GROUP_PREFIX = f"{topic}."
    ensure_topics(topics=[topic, dead_letter_topic(topic)])
    return topic


def read_topic(topic: str, *, expected: int, timeout: float = 20.0, bootstrap: str | None = None) -> list:
    """Every message of the topic from the beginning (no consumer group), until
    `expected` arrived or the timeout passed."""
    extra = {"bootstrap.servers": bootstrap} if bootstrap else {}
    consumer = Consumer(client_config(**{"group.id": "test-reader", "enable.auto.commit": False, **extra}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        messages, deadline = [], time.monotonic() + timeout
        while len(messages) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                messages.append(message)
        return messages
    finally:
        consumer.close()


def read_topic_to_end(topic: str, *, timeout: float = 20.0) -> list:
    """Every message of the topic, read until each partition's end: what it
    holds, duplicates included (`read_topic` stops at the count expected)."""
    consumer = Consumer(
        client_config(**{"group.id": "test-reader", "enable.auto.commit": False, "enable.partition.eof": True})
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return read_to_end(consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions], timeout=timeout)
    except KafkaException as exc:
        raise AssertionError(f"{topic} not read to the end: {exc}") from exc
    finally:
        consumer.close()


def run_consumers(names, *, until, timeout=40.0):
    """Run real consumers in threads until `until(consumers)` holds (or the timeout)."""
    from django.db import connection

    stop = threading.Event()
    consumers = {name: EventConsumer(name=name) for name in names}

    def run(consumer):
        try:
            consumer.run(should_stop=stop.is_set)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(c,)) for c in consumers.values()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not until(consumers):
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    return consumers
