"""Every 202 resolves (issue 48): a broker that came back with an empty log does
not leave the writer or a consumer past the partition's end, a queued checkout
the broker lost is sent again from its Redis record, and one whose record is
gone is rejected queue_lost, its unit back in the gate once."""

import uuid
from functools import partial

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from django.db import IntegrityError

from cart.storage import cart_key
from core.kafka import client_config, consumer_group
from inventory import gate
from orders.exceptions import QueueUnavailable
from orders.models import Order, OrderStatus
from orders.queue_producer import forget_queue_producer
from orders.queue_writer import WRITER_GROUP, QueueWriter
from orders.services import queue_admission, queue_sweeper
from orders.services.queue_admission import QueuedRequest, claims_key, order_key, pending_key, queue_depths
from orders.services.queue_sweeper import StaleResolved, resent_key
from orders.services.queue_writing import write_batch
from outbox.consumers import EventConsumer, register
from outbox.models import OutboxEvent, ProcessedEvent
from outbox.topics import ensure_topics
from tests.helpers import run_in_threads, wait_until, wall_clock_ahead
from tests.orders.conftest import SKU, checkout, drain, queue_sale, shopper_with_cart, stock
from tests.outbox.conftest import kafka_topic  # noqa: F401 - the outbox tests' fresh topic, a fixture here too

# A checkout topic of each test's own: the development one may hold requests of other runs.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka, pytest.mark.usefixtures("queue_topic")]

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
    assert queue_sweeper.resend_stale_queued() == StaleResolved()  # not stale yet
    wall_clock_ahead(monkeypatch, 61, queue_admission, queue_sweeper)

    resolved = queue_sweeper.resend_stale_queued()
    again = queue_sweeper.resend_stale_queued()  # within the period: claimed, not sent twice

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
    wall_clock_ahead(monkeypatch, 61, queue_admission, queue_sweeper)  # the writer was only slow: the copy is there

    assert queue_sweeper.resend_stale_queued().resent == [order_id]
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

    resolved = queue_sweeper.resend_stale_queued()

    assert (resolved.resent, resolved.written, resolved.lost) == ([], [order_id], [999_999_999])
    assert queue_admission.stale_queued() == {SKU: 1}  # still shown, for an operator
    assert "999999999" in caplog.text


def gate_remaining() -> int:
    return gate.counters(skus=[SKU])[SKU]["remaining"]


def test_a_stale_request_whose_record_is_gone_is_rejected_queue_lost_and_its_unit_given_back_once(
    redis, settings, monkeypatch
):
    queue_sale(10)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    shopper = shopper_with_cart(redis)
    order_id = checkout(shopper, "evicted").json()["id"]
    redis.delete(order_key(order_id))  # evicted: it had a TTL, its claim has none
    assert gate_remaining() == 9 and not redis.exists(cart_key(shopper.user.id))  # taken by checkout
    wall_clock_ahead(monkeypatch, 61, queue_admission, queue_sweeper)

    resolved = queue_sweeper.resend_stale_queued()

    assert resolved == StaleResolved(rejected=[order_id])
    shown = shopper.get(f"/api/orders/{order_id}").json()
    assert (shown["status"], shown["rejection_reason"]) == ("REJECTED", "queue_lost")
    assert gate_remaining() == 10 and stock() == (10, 0)
    assert redis.hgetall(cart_key(shopper.user.id)) == {SKU.encode(): b"1"}  # the cart given back
    assert queue_depths() == {SKU: 0} and not redis.exists(claims_key(SKU))
    event = OutboxEvent.objects.get(aggregate_id=str(order_id), event_type="OrderRejected")
    assert event.payload["reason"] == "queue_lost"
    assert queue_sweeper.resend_stale_queued() == StaleResolved()  # resolved once

    writer, read = QueueWriter(), []  # the broker kept it after all: the writer comes second
    try:
        assert wait_until(lambda: read.append(writer.run_once()) or sum(read) >= 1, 30)
        writer.settle()
    finally:
        writer.close()
    assert writer.written == 0 and Order.objects.get().status == OrderStatus.REJECTED
    assert gate_remaining() == 10 and stock() == (10, 0)  # not given back twice
    retried = checkout(shopper, "evicted")  # the same key answers the rejected order
    assert retried.status_code == 200 and retried.json()["id"] == order_id


def test_the_writer_and_the_sweeper_racing_for_lost_requests_resolve_each_once(redis, settings, monkeypatch):
    queue_sale(20)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    for round_ in range(3):
        shoppers = [shopper_with_cart(redis) for _ in range(6)]
        ids = [checkout(shopper, f"race-{round_}-{n}").json()["id"] for n, shopper in enumerate(shoppers)]
        requests = [QueuedRequest.from_json(redis.get(order_key(i))) for i in ids]
        redis.delete(*[order_key(i) for i in ids])  # the copies lost; the writer still has the messages
        with monkeypatch.context() as later:
            wall_clock_ahead(later, 61, queue_admission, queue_sweeper)
            # The writer from the last request, the sweeper from the first: they meet in the middle.
            run_in_threads([partial(write_one_by_one, requests[::-1]), queue_sweeper.resend_stale_queued])
            queue_sweeper.resend_stale_queued()  # whatever a lost race left for the next sweep
        orders = dict(Order.objects.filter(id__in=ids).values_list("id", "status"))
        assert sorted(orders) == sorted(ids)  # each resolved, once
        written = sum(status == OrderStatus.PENDING_PAYMENT for status in orders.values())
        rejected = Order.objects.filter(id__in=ids, rejection_reason="queue_lost").count()
        assert written + rejected == 6
        print("ROUND", written, rejected)
        sold = Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).count()
        assert stock() == (20 - sold, sold) and gate_remaining() == 20 - sold  # every unit back once
        assert queue_depths() == {SKU: 0} and not redis.exists(claims_key(SKU))


def write_one_by_one(requests: list[QueuedRequest]) -> None:
    """The writer as it goes on after a batch the database refused (QueueWriter._write)."""
    for request in requests:
        try:
            write_batch([request])
        except (IntegrityError, psycopg.errors.UniqueViolation):  # the ORM's, and COPY's (core/db.py copy_rows)
            pass  # the sweeper's rejection took the id first; the writer's next delivery finds it


def test_a_writer_whose_topic_the_broker_lost_creates_it_again_with_our_partitions(settings, caplog):
    from tests.outbox.test_topics import partitions

    settings.KAFKA_CHECKOUT_TOPIC = topic = f"{settings.KAFKA_CHECKOUT_TOPIC}.lost-{uuid.uuid4().hex[:8]}"
    assert partitions(topic) is None  # the broker came back without it: checkouts' producers may not create it
    writer = QueueWriter()
    try:
        assert wait_until(lambda: writer.run_once() == 0 and writer.topic_keeper.recreated == 1, 20)
    finally:
        writer.close()
    assert partitions(topic) == settings.KAFKA_TOPIC_PARTITIONS
    assert f"topic {topic} is gone" in caplog.text


def test_a_broker_down_during_the_sweep_leaves_every_unsent_request_to_the_next_sweep(
    redis, queue_topic, settings, monkeypatch
):
    queue_sale(10)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    ids = sorted(checkout(shopper_with_cart(redis), f"down-{n}").json()["id"] for n in range(3))
    broker_loses_the_queue(settings)
    wall_clock_ahead(monkeypatch, 61, queue_admission, queue_sweeper)
    real, sent = queue_sweeper.queue_producer(), []

    class DownAfterOne:
        def send(self, **message):
            if sent:
                raise QueueUnavailable()
            sent.append(message)
            real.send(**message)

    with monkeypatch.context() as down:
        down.setattr(queue_sweeper, "queue_producer", DownAfterOne)
        first = queue_sweeper.resend_stale_queued()
    assert len(first.resent) == 1 and not any(redis.exists(resent_key(i)) for i in ids if i not in first.resent)

    second = queue_sweeper.resend_stale_queued()  # within the period: the one sent is claimed, the others go now
    assert sorted(first.resent + second.resent) == ids
    assert drain(3).written == 3 and stock() == (7, 3)
