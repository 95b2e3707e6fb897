"""Every 202 resolves (issue 48): a broker that came back with an empty log does
not leave the writer or a consumer past the partition's end, and a queued
checkout the broker lost is sent again from its Redis record."""

import pytest
from confluent_kafka import Consumer, TopicPartition

from core.kafka import client_config, consumer_group
from inventory import gate
from orders.models import Order, OrderStatus
from orders.queue_producer import forget_queue_producer
from orders.queue_writer import WRITER_GROUP, QueueWriter
from orders.services import queue_admission
from orders.services.queue_admission import StaleResolved, pending_key, queue_depths
from outbox.consumers import EventConsumer, register
from outbox.models import ProcessedEvent
from outbox.topics import ensure_topics
from tests.helpers import wait_until, wall_clock_ahead
from tests.orders.conftest import SKU, checkout, drain, queue_sale, shopper_with_cart, stock
from tests.outbox.conftest import kafka_topic  # noqa: F401 - the outbox tests' fresh topic, a fixture here too

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka]

PAST_THE_END = 50


def leave_group_past_the_end(group: str, topic: str) -> None:
    """The group's offsets on every partition past the partition's end: where a member
    stands once the broker came back with an empty log (a fresh topic stands for it)."""
    consumer = Consumer(client_config(**{"group.id": consumer_group(group), "enable.auto.commit": False}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        offsets = [TopicPartition(topic, partition, PAST_THE_END) for partition in partitions]
        assert all(tp.error is None for tp in consumer.commit(offsets=offsets, asynchronous=False))
    finally:
        consumer.close()


def test_writer_past_a_partitions_end_reads_it_from_the_start(redis, queue_topic, caplog):
    queue_sale(10)
    clients = [shopper_with_cart(redis) for _ in range(3)]
    assert [checkout(client, f"ends-{n}").status_code for n, client in enumerate(clients)] == [202] * 3
    leave_group_past_the_end(WRITER_GROUP, queue_topic)

    writer = drain(3)

    assert writer.written == 3 and writer.ends.rereads >= 1
    assert Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).count() == 3
    assert stock() == (7, 3)
    assert "reading it again from offset 0" in caplog.text


def test_consumer_past_a_partitions_end_reads_it_from_the_start(kafka_topic, caplog):  # noqa: F811
    from tests.outbox.test_consumers import produce_counted

    @register("test-ends", "Counted")
    def counted(event):
        pass

    produce_counted(kafka_topic, 5)
    leave_group_past_the_end("test-ends", kafka_topic)

    consumer = EventConsumer(name="test-ends")
    consumer.run(should_stop=lambda: consumer.processed >= 5, max_idle_seconds=20)

    assert consumer.processed == 5 and consumer.ends.rereads >= 1
    assert ProcessedEvent.objects.filter(consumer="test-ends").count() == 5
    assert "reading it again from offset 0" in caplog.text


def broker_loses_the_queue(settings) -> None:
    """The broker acknowledged the requests and came back without them: the writer
    reads a topic that never held them."""
    topic = f"{settings.KAFKA_CHECKOUT_TOPIC}.after-restart"
    ensure_topics(topics=[topic])
    settings.KAFKA_CHECKOUT_TOPIC = topic
    forget_queue_producer()


def test_stale_queued_request_is_sent_again_from_its_record_and_written_once(redis, settings, monkeypatch):
    queue_sale(10)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    clients = [shopper_with_cart(redis) for _ in range(3)]
    ids = [checkout(client, f"lost-{n}").json()["id"] for n, client in enumerate(clients)]
    broker_loses_the_queue(settings)
    assert queue_admission.resend_stale_queued() == StaleResolved()  # not stale yet
    wall_clock_ahead(monkeypatch, 61, queue_admission)

    resolved = queue_admission.resend_stale_queued()
    again = queue_admission.resend_stale_queued()  # within the period: claimed, not sent twice

    assert sorted(resolved.resent) == sorted(ids) and again == StaleResolved()
    writer = drain(3)
    assert writer.written == 3
    assert sorted(Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).values_list("id", flat=True)) == sorted(ids)
    assert stock() == (7, 3) and gate.counters(skus=[SKU])[SKU]["remaining"] == 7
    assert queue_admission.stale_queued() == {SKU: 0} and queue_depths() == {SKU: 0}


def test_a_stale_request_sent_again_while_its_first_copy_is_written_is_written_once(redis, settings, monkeypatch):
    queue_sale(10)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    order_id = checkout(shopper_with_cart(redis), "slow-writer").json()["id"]
    wall_clock_ahead(monkeypatch, 61, queue_admission)  # the writer was only slow: the first copy is there

    assert queue_admission.resend_stale_queued().resent == [order_id]
    writer, read = QueueWriter(), []
    try:  # both copies: the second is found written and changes nothing
        assert wait_until(lambda: read.append(writer.run_once()) or sum(read) >= 2, 30)
        writer.settle()
    finally:
        writer.close()
    assert writer.written == 1
    assert Order.objects.filter(id=order_id).count() == 1 and Order.objects.count() == 1
    assert stock() == (9, 1) and gate.counters(skus=[SKU])[SKU]["remaining"] == 9


def test_a_stale_entry_whose_order_was_written_is_dropped_and_one_without_anything_is_reported(
    redis, settings, monkeypatch, caplog
):
    queue_sale(10)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    order_id = checkout(shopper_with_cart(redis), "written").json()["id"]
    drain(1)
    redis.zadd(pending_key(SKU), {order_id: 1, 999_999_999: 1})  # a clean-up lost, and a request lost with its record

    resolved = queue_admission.resend_stale_queued()

    assert (resolved.resent, resolved.written, resolved.lost) == ([], [order_id], [999_999_999])
    assert queue_admission.stale_queued() == {SKU: 1}  # still shown, for an operator
    assert "999999999" in caplog.text
