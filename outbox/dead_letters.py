"""The dead-letter topic, read back: what a consumer gave up on, and putting it
through that consumer's handler again once the cause is fixed
(`manage.py replay_dead_letters`). Replaying is idempotent: apply_event skips
an event the consumer applied before (processed_events)."""

from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from django.conf import settings

from core.kafka import client_config, dead_letter_topic
from outbox.consumers import Event, apply_event, parse_event
from outbox.models import ProcessedEvent


@dataclass(frozen=True)
class DeadLetter:
    partition: int
    offset: int
    consumer: str
    error: str
    event: Event


def read_dead_letters(*, consumer: str, event_id: str | None = None, topic: str | None = None) -> list[DeadLetter]:
    """The dead letters of `consumer` (one event if `event_id`), oldest first,
    read from the beginning of the dead-letter topic to its end."""
    dlq = dead_letter_topic(topic or settings.KAFKA_ORDERS_TOPIC)
    reader = Consumer(client_config(**{"group.id": "shop-dead-letter-reader", "enable.auto.commit": False}))
    try:
        metadata = reader.list_topics(dlq, timeout=10).topics.get(dlq)
        if metadata is None or metadata.error is not None:
            return []
        found = []
        for partition in metadata.partitions:
            low, high = reader.get_watermark_offsets(TopicPartition(dlq, partition), timeout=10)
            if high <= low:
                continue
            reader.assign([TopicPartition(dlq, partition, OFFSET_BEGINNING)])
            while True:
                message = reader.poll(5.0)
                if message is None:
                    raise TimeoutError(f"{dlq} partition {partition}: no message within 5 s before offset {high}")
                if message.error():
                    continue
                headers = {k: v.decode(errors="replace") for k, v in (message.headers() or [])}
                letter = DeadLetter(
                    partition,
                    message.offset(),
                    headers.get("consumer", ""),
                    headers.get("error", ""),
                    parse_event(message.value()),
                )
                if letter.consumer == consumer and event_id in (None, str(letter.event.event_id)):
                    found.append(letter)
                if message.offset() >= high - 1:
                    break
        return found
    finally:
        reader.close()


def already_applied(*, consumer: str, letter: DeadLetter) -> bool:
    return ProcessedEvent.objects.filter(consumer=consumer, event_id=letter.event.event_id).exists()


def replay(*, consumer: str, letter: DeadLetter) -> str:
    """The letter's event through the consumer's handler: processed, duplicate
    (applied before) or ignored (no handler). A handler that fails raises."""
    return apply_event(consumer=consumer, event=letter.event)
