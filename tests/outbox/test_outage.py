"""Kafka stops while the shop is selling: nothing is lost, and the running relay
catches up by itself once a broker is back (the dev broker comes back empty)."""

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.db import connection

from outbox.models import OutboxEvent
from tests.factories import UserFactory, product_with_stock
from tests.helpers import free_port, place_pending_order, start_broker, wait_until
from tests.outbox.conftest import read_topic

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka, pytest.mark.slow]


def unpublished() -> int:
    return OutboxEvent.objects.filter(published_at__isnull=True).count()


def start_relay(*, bootstrap: str, topic: str, log) -> subprocess.Popen:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_ORDERS_TOPIC": topic,
        "OUTBOX_FLUSH_TIMEOUT_SECONDS": "1.5",
        "OUTBOX_MAX_BACKOFF_SECONDS": "2",
        "KAFKA_MESSAGE_TIMEOUT_MS": "2000",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "relay_outbox"],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def partitions(topic: str, bootstrap: str) -> int | None:
    metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=10)
    return len(metadata.topics[topic].partitions) if topic in metadata.topics else None


def test_relay_survives_a_kafka_outage_without_losing_events(redis, tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    topic = f"test.outage.{port}"
    broker_log = open(tmp_path / "broker.log", "wb")
    relay_log = open(tmp_path / "relay.log", "wb")
    broker = start_broker(port, broker_log)
    relay = start_relay(bootstrap=bootstrap, topic=topic, log=relay_log)
    try:
        product_with_stock(sku="A", available=100)
        place_pending_order(redis, UserFactory(), {"A": 1})
        assert wait_until(lambda: unpublished() == 0, 30), "the relay did not publish before the outage"

        broker.terminate()
        broker.wait(10)
        orders = [place_pending_order(redis, UserFactory(), {"A": 1}) for _ in range(50)]  # checkout works
        assert len(orders) == 50 and unpublished() == 50
        assert wait_until(lambda: OutboxEvent.objects.filter(attempts__gte=2).count() == 50, 30)
        second_failed = time.monotonic()
        # Two more failed rounds: the relay is alive and retrying, each after its backoff. Each round is
        # a check of the unfinished run that cannot reach Kafka (at most the 1.5 s flush timeout), then
        # the backoff (0.5 s, 1 s, 2 s): a relay that spins takes at most 3 s for two rounds, one that
        # backs off at least 1 + 2 s more.
        assert wait_until(lambda: OutboxEvent.objects.filter(attempts__gte=4).count() == 50, 30)
        assert time.monotonic() - second_failed >= 4.0, "the relay is spinning instead of backing off"
        assert relay.poll() is None, "the relay died while Kafka was down"

        broker = start_broker(port, broker_log)  # comes back empty
        assert wait_until(lambda: unpublished() == 0, 60), (tmp_path / "relay.log").read_text()[-3000:]
        assert relay.poll() is None  # the same process, never restarted
        messages = read_topic(topic, expected=50, bootstrap=bootstrap)
        received = sorted(json.loads(m.value())["data"]["order_id"] for m in messages)
        assert received == sorted(o.id for o in orders)  # all 50, none lost
    finally:
        relay.terminate()
        relay.wait(20)
        broker.terminate()
        broker.wait(10)


def test_a_broker_restart_under_an_idle_relay_keeps_our_partition_count(redis, tmp_path):
    """The relay's producer outlives a quick broker restart (the dev broker comes
    back empty): its next produce must not auto-create the topic with the
    broker's default of 4 partitions; the relay creates it with ours first."""
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    topic = f"test.restart.{port}"
    broker_log = open(tmp_path / "broker.log", "wb")
    broker = start_broker(port, broker_log)
    relay = start_relay(bootstrap=bootstrap, topic=topic, log=open(tmp_path / "relay.log", "wb"))
    try:
        product_with_stock(sku="A", available=100)
        place_pending_order(redis, UserFactory(), {"A": 1})
        assert wait_until(lambda: unpublished() == 0, 30), "the relay did not publish before the restart"
        assert partitions(topic, bootstrap) == 6

        broker.terminate()
        broker.wait(10)
        broker = start_broker(port, broker_log)
        assert partitions(topic, bootstrap) is None  # empty again
        place_pending_order(redis, UserFactory(), {"A": 1})
        assert wait_until(lambda: unpublished() == 0, 60), (tmp_path / "relay.log").read_text()[-3000:]
        assert partitions(topic, bootstrap) == settings.KAFKA_TOPIC_PARTITIONS == 6
        assert len(read_topic(topic, expected=1, bootstrap=bootstrap)) == 1
    finally:
        relay.terminate()
        relay.wait(20)
        broker.terminate()
        broker.wait(10)
