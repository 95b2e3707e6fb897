import io
import json
import time
import uuid

import pytest
from confluent_kafka import Producer
from django.core import mail
from django.test import Client

from core.kafka import client_config
from inventory.models import Shipment
from orders.models import Notification
from outbox.consumers import Event, apply_event, register
from outbox.models import OutboxEvent, ProcessedEvent
from outbox.relay import OutboxRelay
from outbox.topics import dead_letter_topic
from shop.models import LoyaltyEntry
from tests.factories import UserFactory, product_with_stock
from tests.helpers import place_pending_order, post_webhook
from tests.outbox.conftest import read_topic, read_topic_to_end, run_consumers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka, pytest.mark.slow]

CONSUMERS = ["warehouse", "email", "loyalty"]


def paid_order(redis):
    product_with_stock(sku="A", price=1250, available=10)
    order = place_pending_order(redis, UserFactory(email="buyer@example.com"), {"A": 2})
    assert post_webhook(Client(), payment_id="p1", order_id=order.id, amount=2500).status_code == 200
    return order


def effects(order):
    return (
        Shipment.objects.filter(order_id=order.id).count(),
        Notification.objects.filter(order=order, kind="order_confirmed").count(),
        list(LoyaltyEntry.objects.filter(order_id=order.id).values_list("points", flat=True)),
    )


def test_order_paid_reaches_every_consumer_once(redis, kafka_topic):
    order = paid_order(redis)
    assert OutboxRelay().drain() == 4  # OrderCreated, OrderPaid, PaymentAuthorized, PaymentCaptured
    # warehouse: OrderCreated (its stock check) and OrderPaid; email: OrderPaid and PaymentCaptured
    # (the receipt); loyalty: OrderPaid
    run_consumers(CONSUMERS, until=lambda _: ProcessedEvent.objects.count() >= 5)
    assert effects(order) == (1, 1, [25])
    assert Shipment.objects.get(order_id=order.id).items[0]["quantity"] == 2
    [email] = [m for m in mail.outbox if "confirmed" in m.subject]
    assert email.to == ["buyer@example.com"]


def test_relay_crash_between_produce_and_mark_does_not_double_effects(redis, kafka_topic):
    order = paid_order(redis)
    crashing = OutboxRelay()

    def crash(acked):
        raise SystemExit("killed after Kafka acknowledged, before marking")

    crashing.before_mark = crash
    with pytest.raises(SystemExit):
        crashing.publish_batch()
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 4  # marking rolled back
    assert crashing.producer is None and crashing.retry_at > 0  # dropped, and backing off
    assert OutboxRelay().drain() == 0  # found in Kafka and marked, not produced a second time
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    assert len(read_topic_to_end(kafka_topic)) == 4
    run_consumers(CONSUMERS, until=lambda _: ProcessedEvent.objects.count() >= 5, timeout=20)
    assert effects(order) == (1, 1, [25])


def test_redelivered_message_has_one_effect(redis, kafka_topic):
    order = paid_order(redis)
    paid = OutboxEvent.objects.get(event_type="OrderPaid")
    producer = Producer(client_config())
    value = json.dumps(
        {
            "event_id": str(paid.event_id),
            "event_type": "OrderPaid",
            "occurred_at": paid.created_at.isoformat(),
            "aggregate_type": "order",
            "aggregate_id": str(order.id),
            "data": paid.payload,
        }
    ).encode()
    for _ in range(3):
        producer.produce(kafka_topic, key=str(order.id).encode(), value=value)
    assert producer.flush(10) == 0
    consumers = run_consumers(["loyalty"], until=lambda c: c["loyalty"].processed + c["loyalty"].duplicates >= 3)
    assert consumers["loyalty"].processed == 1 and consumers["loyalty"].duplicates == 2
    assert list(LoyaltyEntry.objects.values_list("points", flat=True)) == [25]


def test_poison_message_goes_to_the_dlq_and_the_next_is_processed(redis, kafka_topic, settings):
    settings.CONSUMER_MAX_ATTEMPTS = 2
    order = paid_order(redis)
    producer = Producer(client_config())
    producer.produce(kafka_topic, key=str(order.id).encode(), value=b"{not json")  # same partition, first
    assert producer.flush(10) == 0
    OutboxRelay().drain()
    consumers = run_consumers(["loyalty"], until=lambda _: LoyaltyEntry.objects.exists())
    assert list(LoyaltyEntry.objects.values_list("points", flat=True)) == [25]
    assert consumers["loyalty"].dead_lettered == 1
    [dead] = read_topic(dead_letter_topic(kafka_topic), expected=1)
    assert dead.value() == b"{not json"
    headers = dict(dead.headers())
    assert b"JSONDecodeError" in headers["error"] and headers["consumer"] == b"loyalty"


def test_apply_event_twice_applies_once_and_failure_leaves_no_trace(db):
    calls = []

    @register("test-consumer", "Boom")
    def boom(event):
        calls.append(event.event_id)
        ProcessedEvent.objects.create(consumer="side-effect", event_id=uuid.uuid4(), event_type="x")
        if len(calls) == 1:
            raise RuntimeError("first try fails")

    event = Event(uuid.uuid4(), "Boom", "2026-01-01T00:00:00+00:00", "order", "1", {})
    with pytest.raises(RuntimeError):
        apply_event(consumer="test-consumer", event=event)
    assert not ProcessedEvent.objects.exists()  # the effect and the ledger rolled back together
    assert apply_event(consumer="test-consumer", event=event) == "processed"
    assert apply_event(consumer="test-consumer", event=event) == "duplicate"
    other = Event(uuid.uuid4(), "NotForMe", "2026-01-01T00:00:00+00:00", "order", "1", {})
    assert apply_event(consumer="test-consumer", event=other) == "ignored"
    assert len(calls) == 2
    assert ProcessedEvent.objects.filter(consumer="test-consumer").count() == 1


def produce_counted(topic: str, count: int) -> None:
    """`count` Counted events n = 0, 1, ...: one key, so one partition, in this order."""
    producer = Producer(client_config())
    for n in range(count):
        body = {
            "event_id": str(uuid.uuid4()),
            "event_type": "Counted",
            "occurred_at": "2026-01-01T00:00:00+00:00",
            "aggregate_type": "order",
            "aggregate_id": "1",
            "data": {"n": n},
        }
        producer.produce(topic, key=b"1", value=json.dumps(body).encode())
    assert producer.flush(10) == 0


def test_a_consumer_stopped_mid_batch_commits_only_what_it_applied(kafka_topic):
    from outbox.consumers import EventConsumer

    @register("test-batch", "Counted")
    def counted(event):
        pass

    produce_counted(kafka_topic, 5)

    first = EventConsumer(name="test-batch")
    first.run(should_stop=lambda: first.processed >= 2, max_idle_seconds=20)  # as SIGTERM after two
    assert first.processed == 2
    second = EventConsumer(name="test-batch")  # the same group: starts after what was committed
    second.run(should_stop=lambda: second.processed + second.duplicates >= 3, max_idle_seconds=20)
    assert (second.processed, second.duplicates) == (3, 0)
    assert ProcessedEvent.objects.filter(consumer="test-batch").count() == 5


def test_a_batch_that_runs_out_of_time_has_its_other_messages_read_again(kafka_topic, monkeypatch):
    from outbox.consumers import EventConsumer

    monkeypatch.setattr("outbox.consumers.MAX_BATCH_SECONDS", 0.0)  # every batch ends after one message
    seen = []

    @register("test-slow", "Counted")
    def counted(event):
        seen.append(event.data["n"])

    produce_counted(kafka_topic, 5)

    consumer = EventConsumer(name="test-slow")
    consumer.run(should_stop=lambda: consumer.processed >= 5, max_idle_seconds=20)
    assert seen == [0, 1, 2, 3, 4] and consumer.duplicates == 0


def waiting(name: str) -> float | None:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("shop_consumer_waiting", {"consumer": name})


def lines(caplog, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


def test_a_database_failure_in_a_handler_is_waited_out_not_dead_lettered(kafka_topic, settings, caplog):
    from django.db import OperationalError

    from outbox.consumers import EventConsumer

    settings.CONSUMER_MAX_ATTEMPTS = 2
    settings.CONSUMER_MAX_BACKOFF_SECONDS = 0.05
    calls = []

    @register("test-db-down", "Counted")
    def counted(event):
        calls.append(event.data["n"])
        if len(calls) <= 6:  # three times the dead-letter limit
            raise OperationalError("server closed the connection unexpectedly")

    produce_counted(kafka_topic, 2)
    consumer = EventConsumer(name="test-db-down")
    states = []
    consumer.run(
        should_stop=lambda: states.append(waiting("test-db-down")) or consumer.processed >= 2, max_idle_seconds=20
    )
    assert calls == [0] * 7 + [1]  # the first message kept and retried, then the next in order
    assert (consumer.processed, consumer.dead_lettered) == (2, 0)
    assert read_topic(dead_letter_topic(kafka_topic), expected=1, timeout=2) == []
    assert lines(caplog, "waiting for the database") == 1 and lines(caplog, "the database is back") == 1
    assert 1.0 in states and waiting("test-db-down") == 0.0


def test_only_the_handlers_own_failures_count_toward_the_dead_letter_limit(kafka_topic, settings):
    import redis
    from django.db import OperationalError

    from outbox.consumers import EventConsumer

    settings.CONSUMER_MAX_ATTEMPTS = 3
    settings.CONSUMER_MAX_BACKOFF_SECONDS = 0.05
    failures = [
        ValueError("bad data"),
        OperationalError("db down"),
        ValueError("bad data"),
        redis.exceptions.ConnectionError("redis down"),
        ConnectionResetError(),
        ValueError("bad data"),
    ]
    calls = []

    @register("test-poison", "Counted")
    def counted(event):
        calls.append(event.data["n"])
        if event.data["n"] == 0:
            raise failures[len(calls) - 1]

    produce_counted(kafka_topic, 2)
    consumer = EventConsumer(name="test-poison")
    consumer.run(should_stop=lambda: consumer.processed >= 1, max_idle_seconds=20)
    assert calls == [0] * 6 + [1]  # dead-lettered at the third ValueError, not the third failure
    assert (consumer.dead_lettered, consumer.processed) == (1, 1)
    [dead] = read_topic(dead_letter_topic(kafka_topic), expected=1)
    assert dict(dead.headers())["error"] == b"ValueError: bad data"


def test_a_consumer_waiting_for_the_database_stops_promptly_and_keeps_the_message(kafka_topic, settings):
    from django.db import OperationalError

    from outbox.consumers import EventConsumer

    settings.CONSUMER_MAX_ATTEMPTS = 1
    down = True

    @register("test-stop", "Counted")
    def counted(event):
        if down:
            raise OperationalError("the database system is shutting down")

    produce_counted(kafka_topic, 1)
    first = EventConsumer(name="test-stop")
    entered = []

    def stop_two_seconds_in() -> bool:
        if first.outage is not None and not entered:
            entered.append(time.monotonic())
        return bool(entered) and time.monotonic() - entered[0] > 2.0

    first.run(should_stop=stop_two_seconds_in, max_idle_seconds=20)
    assert entered and time.monotonic() - entered[0] < 3.0  # not stuck in a 5 s backoff
    assert first.outage.retries >= 3 and first.dead_lettered == 0

    down = False
    second = EventConsumer(name="test-stop")  # the same group: the offset was not committed
    second.run(should_stop=lambda: second.processed >= 1, max_idle_seconds=20)
    assert second.processed == 1 and ProcessedEvent.objects.filter(consumer="test-stop").count() == 1


def test_the_handlers_tests_register_do_not_outlive_them(consumer_handlers):
    """tests/conftest.py restores the registry after every test: the test-* consumers
    registered by the tests above are gone, and the apps' own handlers are all there."""
    from inventory.handlers import alert_low_stock, cancel_shipment, request_shipment, shorten_shipment
    from orders.handlers import (
        capture_on_shipment,
        forget_erased_customer_addresses,
        send_cancellation_notice,
        send_lines_removed_notice,
        send_order_confirmation,
        send_payment_receipt,
        send_payment_request,
        send_refund_completed,
        send_refund_notice,
        send_return_decision,
        send_return_received,
        send_shipping_notice,
        submit_requested_refund,
        void_on_cancellation,
        void_what_paid_no_order,
    )
    from shop.handlers import (
        award_points,
        keep_points_of_an_erased_customer,
        reverse_points_of_a_cancelled_paid_order,
        take_back_points_of_removed_lines,
        take_back_refunded_points,
    )

    assert consumer_handlers == {
        "warehouse": {
            "OrderPaid": request_shipment,
            "OrderCancelled": cancel_shipment,
            "OrderCreated": alert_low_stock,
            "OrderLinesCancelled": shorten_shipment,
        },
        "email": {
            "OrderPaid": send_order_confirmation,
            "OrderCancelled": send_cancellation_notice,
            "RefundRequested": send_refund_notice,
            "OrderShipped": send_shipping_notice,
            "RefundCompleted": send_refund_completed,
            "PaymentCaptured": send_payment_receipt,
            "OrderLinesCancelled": send_lines_removed_notice,
            "ReturnApproved": send_return_decision,
            "ReturnRejected": send_return_decision,
            "ReturnReceived": send_return_received,
            "OrderPaymentRequested": send_payment_request,
            "CustomerErased": forget_erased_customer_addresses,
        },
        "payments": {
            "RefundRequested": submit_requested_refund,
            "OrderShipped": capture_on_shipment,
            "OrderCancelled": void_on_cancellation,
            "PaymentAuthorized": void_what_paid_no_order,
        },
        "loyalty": {
            "OrderPaid": award_points,
            "RefundCompleted": take_back_refunded_points,
            "OrderLinesCancelled": take_back_points_of_removed_lines,
            "OrderCancelled": reverse_points_of_a_cancelled_paid_order,
            "CustomerErased": keep_points_of_an_erased_customer,
        },
    }


def test_replay_dead_letters_puts_them_through_the_handler_once(redis, kafka_topic, settings, consumer_handlers):
    from django.core.management import call_command

    from inventory.handlers import request_shipment

    settings.CONSUMER_MAX_ATTEMPTS = 2

    def broken(event):
        raise RuntimeError("the warehouse's handler has a bug")

    consumer_handlers["warehouse"]["OrderPaid"] = broken
    order = paid_order(redis)
    OutboxRelay().drain()
    consumers = run_consumers(["warehouse"], until=lambda c: c["warehouse"].dead_lettered == 1)
    assert consumers["warehouse"].dead_lettered == 1 and not Shipment.objects.exists()
    [paid] = OutboxEvent.objects.filter(event_type="OrderPaid")

    consumer_handlers["warehouse"]["OrderPaid"] = request_shipment  # the bug fixed
    out = io.StringIO()
    call_command("replay_dead_letters", "warehouse", "--dry-run", stdout=out)
    assert f"OrderPaid {paid.event_id}" in out.getvalue() and "would be replayed" in out.getvalue()
    assert "the warehouse's handler has a bug" in out.getvalue() and not Shipment.objects.exists()

    out = io.StringIO()
    call_command("replay_dead_letters", "warehouse", "--event-id", str(paid.event_id), stdout=out)
    assert f"OrderPaid {paid.event_id} (dead letter" in out.getvalue() and ": processed" in out.getvalue()
    assert Shipment.objects.filter(order_id=order.id).count() == 1

    out = io.StringIO()
    call_command("replay_dead_letters", "warehouse", stdout=out)
    assert ": duplicate" in out.getvalue() and Shipment.objects.count() == 1
    out = io.StringIO()
    call_command("replay_dead_letters", "email", stdout=out)
    assert "0 dead letter(s) of email" in out.getvalue()
