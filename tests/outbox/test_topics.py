"""Our topics are created with our partition count before any producer touches
them, and a topic with another count is said loudly (command, log, /readyz)."""

import itertools

import pytest
from confluent_kafka.admin import NewTopic
from django.core.management import call_command

from core.kafka import admin_client
from outbox.topics import dead_letter_topic, ensure_topics

pytestmark = [pytest.mark.kafka]
_names = itertools.count()


@pytest.fixture
def fresh_topic(settings, run_id):
    """A topic name nobody created yet, as our orders topic."""
    topic = f"test.{run_id}.topics.{next(_names)}"
    settings.KAFKA_ORDERS_TOPIC = topic
    settings.KAFKA_TOPIC_PARTITIONS = 6
    return topic


def partitions(topic: str) -> int | None:
    metadata = admin_client().list_topics(timeout=10)
    return len(metadata.topics[topic].partitions) if topic in metadata.topics else None


def create(topic: str, count: int) -> None:
    admin = admin_client()  # kept alive until the future resolves
    [future] = admin.create_topics([NewTopic(topic, count, 1)], operation_timeout=10).values()
    future.result(timeout=10)


def test_kafka_topics_creates_ours_with_their_partition_count(fresh_topic, capsys):
    call_command("kafka_topics")
    out = capsys.readouterr()
    assert f"{fresh_topic}: created, 6 partitions" in out.out
    assert f"{dead_letter_topic(fresh_topic)}: created, 6 partitions" in out.out
    assert "WARNING" not in out.err
    call_command("kafka_topics")
    assert f"{fresh_topic}: exists, 6 partitions" in capsys.readouterr().out


def test_a_topic_with_another_partition_count_is_said_loudly(fresh_topic, capsys, caplog, client, db):
    create(fresh_topic, 4)  # as a producer's auto-creation on the dev broker leaves it
    call_command("kafka_topics")
    assert f"WARNING: {fresh_topic} has 4 partitions, expected 6" in capsys.readouterr().err
    assert any("has 4 partitions, expected 6" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)

    body = client.get("/readyz").json()
    assert body["status"] == "ready"  # it serves as before; an operator must act
    assert any(f"topic {fresh_topic} has 4 partitions, expected 6" in w for w in body["warnings"])


def test_readyz_has_no_warning_when_the_topics_are_right(fresh_topic, client, db):
    ensure_topics()
    body = client.get("/readyz").json()
    assert body["warnings"] == [] and body["status"] == "ready"


def test_kafka_topics_command_creates_what_is_missing(settings, run_id, capsys):
    settings.KAFKA_ORDERS_TOPIC = f"test.{run_id}.topics"
    call_command("kafka_topics")
    call_command("kafka_topics")
    out = capsys.readouterr().out
    assert f"{settings.KAFKA_ORDERS_TOPIC}: created" in out and f"{settings.KAFKA_ORDERS_TOPIC}.dlq: exists" in out
