"""After a run that did not finish (its process killed between Kafka's
acknowledgement and the mark, or a batch Kafka may have taken without saying
so): which of the waiting events the topic already has. The next leader marks
those instead of publishing them a second time.

The relay is the only producer of its topic and the next leader reads before
it produces, so what a partition got since the unfinished run started is that
run's output (and the end of the run before it)."""

from datetime import datetime

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from core.kafka import client_config, read_to_end

# Messages carry the producer's CreateTime from the relay's own host, the clock
# that wrote `started_at`; the margin covers a topic set to LogAppendTime (the
# broker's clock) and clocks a little apart. Reading a minute more costs little
# and happens only after a run that did not finish.
CLOCK_MARGIN_SECONDS = 60


def event_ids_in_topic(topic: str, *, since: datetime, timeout: float) -> set[str]:
    """The `event_id` headers of the messages the topic got since `since`.
    Raises KafkaException when the broker cannot say within `timeout` (no
    progress for that long)."""
    consumer = Consumer(
        client_config(
            **{
                "group.id": "shop.relay-recovery",  # assigned, never joined or committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            if metadata is not None and metadata.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(metadata.error)
            return set()  # a broker that restarted empty: nothing of the run is there
        since_ms = int((since.timestamp() - CLOCK_MARGIN_SECONDS) * 1000)
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, partition, since_ms) for partition in metadata.partitions], timeout=timeout
        )
        for start in starts:
            if start.error is not None:
                raise KafkaException(start.error)
        to_read = [start for start in starts if start.offset >= 0]  # -1: nothing that recent
        messages = read_to_end(consumer, to_read, timeout=timeout)
    finally:
        consumer.close()
    return {event_id.decode() for message in messages if (event_id := dict(message.headers() or ()).get("event_id"))}
