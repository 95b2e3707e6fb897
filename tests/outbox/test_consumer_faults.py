"""Consumers under real outages: PostgreSQL stopped under a consumer holding an
OrderPaid, and a Kafka broker stopped under a running consumer."""

import functools
import json
import logging
import smtplib
import subprocess
import threading
import uuid

import pytest
import redis
from confluent_kafka import Producer
from django.db import DataError, IntegrityError, InterfaceError, OperationalError, connection
from django.test import Client
from prometheus_client import REGISTRY

from core.kafka import broker_failures, client_config
from core.outages import failed_service
from inventory.models import Shipment
from orders.models import Order
from outbox.consumers import EventConsumer
from outbox.models import OutboxEvent
from outbox.topics import dead_letter_topic, ensure_topics
from tests.factories import UserFactory, product_with_stock
from tests.helpers import free_port, place_pending_order, post_webhook, run_until_stopped, start_broker, wait_until
from tests.outbox.conftest import read_topic


@pytest.mark.parametrize(
    ("error", "service"),
    [
        (OperationalError("server closed the connection unexpectedly"), "database"),
        (InterfaceError("connection already closed"), "database"),
        (redis.exceptions.ConnectionError(), "redis"),
        (redis.exceptions.BusyLoadingError(), "redis"),
        (redis.exceptions.TimeoutError(), "redis"),
        (ConnectionRefusedError(), "network"),
        (TimeoutError(), "network"),
        (smtplib.SMTPServerDisconnected(), "network"),
        (IntegrityError("duplicate key"), None),
        (DataError("value too long"), None),
        (redis.exceptions.ResponseError("WRONGTYPE"), None),
        (smtplib.SMTPRecipientsRefused({}), None),  # an OSError, but the address is wrong, not the network
        (FileNotFoundError(), None),
        (KeyError("order_id"), None),
        (ValueError("bad"), None),
    ],
)
def test_failed_service_tells_outages_from_handler_failures(error, service):
    assert failed_service(error) == service


@functools.cache
def pg_cluster() -> list[str]:
    """The Debian cluster (version, name) the settings' database runs in, asked of
    the server while it is up (Debian sets cluster_name, e.g. "15/main"), and
    remembered for starting it again."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('cluster_name'), current_setting('data_directory')")
        cluster_name, data_directory = cursor.fetchone()
    version_and_name = cluster_name or "/".join(data_directory.rstrip("/").split("/")[-2:])
    return version_and_name.split("/")


def pg_ctl(action: str, *options: str) -> None:
    cluster = pg_cluster()
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action, *options], check=True)


def paid_order(redis, *, sku: str, payment_id: str) -> Order:
    product_with_stock(sku=sku, price=1000, available=10)
    order = place_pending_order(redis, UserFactory(), {sku: 1})
    assert post_webhook(Client(), payment_id=payment_id, order_id=order.id, amount=1000).status_code == 200
    return order


def order_paid_message(order: Order) -> tuple[bytes, bytes]:
    """The order's OrderPaid (key, value) as the relay writes it."""
    paid = OutboxEvent.objects.get(event_type="OrderPaid", aggregate_id=str(order.id))
    value = {
        "event_id": str(paid.event_id),
        "event_type": "OrderPaid",
        "occurred_at": paid.created_at.isoformat(),
        "aggregate_type": "order",
        "aggregate_id": str(order.id),
        "data": paid.payload,
    }
    return str(order.id).encode(), json.dumps(value).encode()


def produce(topic: str, message: tuple[bytes, bytes]) -> None:
    producer = Producer(client_config())
    producer.produce(topic, key=message[0], value=message[1])
    assert producer.flush(10) == 0


def lines(caplog, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.django_db(transaction=True)
def test_a_database_restart_under_a_consumer_delays_the_shipment_and_dead_letters_nothing(
    redis, kafka_topic, settings, caplog
):
    settings.CONSUMER_MAX_BACKOFF_SECONDS = 2.0
    before, during = paid_order(redis, sku="A", payment_id="p1"), paid_order(redis, sku="B", payment_id="p2")
    held = order_paid_message(during)  # read now: while PostgreSQL is down this process cannot
    produce(kafka_topic, order_paid_message(before))
    warehouse, stop = EventConsumer(name="warehouse"), threading.Event()
    thread = run_until_stopped(warehouse, stop)
    try:
        # Its first shipment leaves the consumer a connection that the restart breaks.
        assert wait_until(lambda: warehouse.processed == 1, 30)
        pg_ctl("stop", "-m", "fast")
        try:
            produce(kafka_topic, held)
            assert wait_until(lambda: warehouse.outage is not None, 10), "the consumer never met the outage"
            outage = warehouse.outage
            # Several retries, each unlogged after the first (their backoff doubles from 0.1 s).
            assert wait_until(lambda: outage.retries >= 5, 20), outage
        finally:
            pg_ctl("start")
        connection.close()  # this thread's connection died with the server
        assert wait_until(lambda: warehouse.processed == 2, 30)
    finally:
        stop.set()
        thread.join(30)
    assert Shipment.objects.filter(order_id=during.id).count() == 1
    assert Shipment.objects.count() == 2 and warehouse.dead_lettered == 0
    assert read_topic(dead_letter_topic(kafka_topic), expected=1, timeout=3) == []
    assert lines(caplog, "warehouse: waiting for the database") == 1
    assert lines(caplog, "warehouse: the database is back") == 1


def unlogged_failures(monkeypatch) -> list[logging.LogRecord]:
    """From now on, the broker failures core.kafka's filter keeps out of the log."""
    unlogged, logs = [], broker_failures.filter

    def counted(record: logging.LogRecord) -> bool:
        if logs(record):
            return True
        unlogged.append(record)
        return False

    monkeypatch.setattr(broker_failures, "filter", counted)
    return unlogged


def ignored() -> float:
    return REGISTRY.get_sample_value("shop_consumer_events_total", {"consumer": "warehouse", "result": "ignored"}) or 0


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.timeout(90)
@pytest.mark.django_db(transaction=True)
def test_a_kafka_outage_is_logged_once_and_so_is_the_recovery(settings, caplog, tmp_path, monkeypatch):
    port = free_port()
    settings.KAFKA_BOOTSTRAP_SERVERS = f"127.0.0.1:{port}"
    settings.KAFKA_ORDERS_TOPIC = topic = f"test.kafka-down.{port}"
    broker_log = open(tmp_path / "broker.log", "wb")
    broker = start_broker(port, broker_log)
    ensure_topics(topics=[topic, dead_letter_topic(topic)])
    consumer, stop = EventConsumer(name="warehouse"), threading.Event()
    seen = ignored()
    thread = run_until_stopped(consumer, stop)
    try:
        body = {
            "event_id": str(uuid.uuid4()),
            "event_type": "NotForTheWarehouse",
            "aggregate_type": "order",
            "aggregate_id": "1",
            "occurred_at": "2026-01-01T00:00:00+00:00",
            "data": {},
        }
        produce(topic, (b"1", json.dumps(body).encode()))
        assert wait_until(lambda: ignored() > seen, 30), "the consumer never read from the test broker"
        up_to, unlogged = len(caplog.records), unlogged_failures(monkeypatch)
        broker.terminate()
        broker.wait(10)
        # librdkafka retries every ~50 ms: 20 failed connects, each kept out of the log by the filter.
        assert wait_until(lambda: len(unlogged) >= 20, 30), len(unlogged)
        down = [r for r in caplog.records[up_to:] if r.name == "shop.kafka"]
        # Disconnects, the first failure and a request timed out on a slow machine: not one per retry.
        assert 1 <= len(down) <= 6, [r.getMessage() for r in down]
        assert any(r.levelname == "ERROR" and "Connection refused" in r.getMessage() for r in down)
        broker = start_broker(port, broker_log)  # comes back empty
        ensure_topics(topics=[topic, dead_letter_topic(topic)])
        assert wait_until(lambda: lines(caplog, "reachable again") >= 1, 15), [r.getMessage() for r in caplog.records]
        assert len([r for r in caplog.records[up_to:] if r.name == "shop.kafka"]) <= 10
    finally:
        stop.set()
        thread.join(30)
        broker.terminate()
        broker.wait(10)
