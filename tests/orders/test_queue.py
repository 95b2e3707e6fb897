"""Queue-mode flash sales, on the real broker: 202 -> QUEUED -> written in
batches by the writer, replays, rejections, Kafka down, a writer killed."""

import itertools
import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cart.storage import cart_key
from core.kafka import client_config
from inventory import gate
from inventory.models import Stock
from inventory.services.flash_sales import seed_flash_sale, set_flash_sale_mode
from orders.models import Order, OrderStatus
from orders.queue_writer import QueueWriter
from orders.services import expire_unpaid_orders, place_order
from orders.services import queue as queue_service
from orders.services.queue import QueuedLine, QueuedRequest, allocate_order_id, queue_depths, write_batch
from outbox.models import OutboxEvent
from outbox.topics import ensure_topics
from tests.factories import SHIPPING_ADDRESS, UserFactory, product_with_stock
from tests.helpers import expire_now, fill_cart, post_webhook, shopper_client, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka]

_topics = itertools.count()
SKU = "FLASH-Q"


@pytest.fixture(autouse=True)
def queue_topic(settings, run_id, monkeypatch):
    """A checkout topic and writer group of this test's own; a fresh producer."""
    topic = f"test.{run_id}.checkout.{next(_topics)}"
    settings.KAFKA_CHECKOUT_TOPIC = topic
    settings.KAFKA_CONSUMER_GROUP_PREFIX = f"{topic}."
    ensure_topics(topics=[topic])
    monkeypatch.setattr(queue_service, "_producer", None)
    return topic


def queue_sale(stock: int, *, mode: str = "queue", limit: int | None = None) -> None:
    seed_flash_sale(sku=SKU, stock=stock, price=500, name="Flash", per_customer_limit=limit, mode=mode)


def checkout(client, key: str):
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key)


def shopper_with_cart(redis, lines=None):
    client = shopper_client()
    fill_cart(redis, client.user.id, lines or {SKU: 1})
    return client


def drain(expected_orders: int, *, timeout: float = 30.0) -> QueueWriter:
    """Run a writer until `expected_orders` orders exist and the queue is empty."""
    writer = QueueWriter()
    try:
        assert wait_until(lambda: writer.run_once() == 0 and Order.objects.count() >= expected_orders, timeout)
    finally:
        writer.consumer.close()
    return writer


def stock() -> tuple[int, int]:
    row = Stock.objects.get(product_id=SKU)
    return row.available, row.reserved


def test_queued_checkout_is_202_then_queued_then_written(redis):
    queue_sale(10)
    client = shopper_with_cart(redis)

    response = checkout(client, "q-1")

    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "QUEUED" and body["total"] == 500 and body["items"][0]["sku"] == SKU
    assert response["Location"] == f"/api/orders/{body['id']}"
    assert not Order.objects.exists()  # nothing written yet: the API knows it from Redis
    assert client.get(response["Location"]).json()["status"] == "QUEUED"
    assert redis.hlen(cart_key(client.user.id)) == 1  # the cart is kept until the order is written
    assert queue_depths() == {SKU: 1}

    drain(1)

    written = client.get(response["Location"])
    assert written.status_code == 200
    assert written.json()["status"] == OrderStatus.PENDING_PAYMENT and written.json()["expires_at"]
    assert stock() == (9, 1)
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 9
    assert redis.hlen(cart_key(client.user.id)) == 0
    [created] = OutboxEvent.objects.filter(event_type="OrderCreated")
    assert created.payload["order_id"] == body["id"]
    assert queue_depths() == {SKU: 0}


def test_shop_status_shows_the_queue_and_its_writer(redis, capsys):
    queue_sale(10)
    assert checkout(shopper_with_cart(redis), "q-status").status_code == 202
    call_command("shop_status")
    out = capsys.readouterr().out
    assert "order-writer" in out
    assert f"{SKU}" in out and "queue" in out and "queued (not yet written) 1" in out


def test_an_admitted_queued_checkout_makes_no_sql_but_one_statement_per_hundred_ids(redis):
    queue_sale(1000)
    customers = [UserFactory() for _ in range(6)]
    for customer in customers:
        fill_cart(redis, customer.id, {SKU: 1})
    place_order(customer_id=customers[0].id, idempotency_key="warm")  # warms the caches, takes a block of ids
    with CaptureQueriesContext(connection) as captured:
        for customer in customers[1:]:
            assert place_order(
                customer_id=customer.id, idempotency_key="cold", shipping_address=SHIPPING_ADDRESS
            ).queued
    assert captured.captured_queries == []
    assert redis.llen("queue:ids") == queue_service.ID_BLOCK - 1 - 5


def test_the_same_key_is_the_same_order_while_queued_and_after(redis):
    queue_sale(10)
    client = shopper_with_cart(redis)
    first = checkout(client, "q-twice")
    again = checkout(client, "q-twice")
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 9  # units taken once

    drain(1)
    fill_cart(redis, client.user.id, {SKU: 1})
    after = checkout(client, "q-twice")
    assert after.status_code == 200 and after["Idempotent-Replayed"] == "true"
    assert after.json()["id"] == first.json()["id"] and after.json()["status"] == OrderStatus.PENDING_PAYMENT
    assert Order.objects.count() == 1 and stock() == (9, 1)
    assert first.json()["shipping_address"]["city"] == "Madrid"  # the saved address, queued with the request
    assert Order.objects.get().shipping_address == first.json()["shipping_address"]  # and written by COPY


def test_what_the_stock_cannot_cover_is_rejected_in_arrival_order(redis):
    queue_sale(2)
    gate.set_counter(sku=SKU, remaining=5, reset_customers=False)  # the gate drifted above the database
    clients = [shopper_with_cart(redis) for _ in range(4)]
    ids = []
    for n, client in enumerate(clients):
        response = checkout(client, f"q-drift-{n}")
        assert response.status_code == 202
        ids.append(response.json()["id"])

    drain(4)

    statuses = dict(Order.objects.values_list("id", "status"))
    assert [statuses[i] for i in ids] == [OrderStatus.PENDING_PAYMENT] * 2 + [OrderStatus.REJECTED] * 2
    assert set(Order.objects.filter(status=OrderStatus.REJECTED).values_list("rejection_reason", flat=True)) == {
        "out_of_stock"
    }
    assert stock() == (0, 2)  # exactly the database's stock was sold
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 5 - 4 + 2  # the rejected got their units back
    assert OutboxEvent.objects.filter(event_type="OrderRejected").count() == 2
    rejected_client = clients[2]
    assert redis.hlen(cart_key(rejected_client.user.id)) == 1  # a rejected shopper keeps the cart
    shown = rejected_client.get(f"/api/orders/{ids[2]}").json()
    assert shown["status"] == OrderStatus.REJECTED and shown["rejection_reason"] == "out_of_stock"


def test_kafka_down_at_admission_is_503_and_holds_nothing(redis, settings):
    queue_sale(10)
    product_with_stock(sku="REGULAR", available=5)
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # nothing listens there
    settings.QUEUE_ADMIT_TIMEOUT_MS = 300
    client = shopper_with_cart(redis)

    response = checkout(client, "q-down")

    assert response.status_code == 503 and response.json()["error"]["code"] == "queue_unavailable"
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 10  # the gate units went back
    assert not redis.keys("queue:key:*") and not redis.keys("queue:order:*")
    assert not Order.objects.exists()
    other = shopper_with_cart(redis, {"REGULAR": 1})
    assert checkout(other, "direct-1").status_code == 201  # direct checkouts of other SKUs go on


def test_a_sale_switches_mode_while_running(redis):
    queue_sale(10, mode="direct")
    assert checkout(shopper_with_cart(redis), "m-1").status_code == 201
    set_flash_sale_mode(sku=SKU, mode="queue")
    assert checkout(shopper_with_cart(redis), "m-2").status_code == 202
    set_flash_sale_mode(sku=SKU, mode="direct")
    assert checkout(shopper_with_cart(redis), "m-3").status_code == 201
    drain(3)
    assert Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).count() == 3 and stock() == (7, 3)


def test_a_queued_order_is_paid_and_expires_like_any_other(redis, client):
    queue_sale(10)
    paying, forgetting = shopper_with_cart(redis), shopper_with_cart(redis)
    paid_id = checkout(paying, "p-1").json()["id"]
    expiring_id = checkout(forgetting, "p-2").json()["id"]
    drain(2)

    assert post_webhook(client, payment_id="pay-q", order_id=paid_id, amount=500).status_code == 200
    expire_now(Order.objects.get(id=expiring_id))
    assert expire_unpaid_orders() == 1

    assert Order.objects.get(id=paid_id).status == OrderStatus.PAID
    assert Order.objects.get(id=expiring_id).status == OrderStatus.CANCELLED
    assert stock() == (9, 1)


def test_a_key_already_written_under_another_id_and_a_bad_request_do_not_hold_the_queue(redis, queue_topic):
    queue_sale(100)
    alice, bob, gone = UserFactory(), UserFactory(), UserFactory()
    first = write_batch([request_for(alice, "k-1")])
    assert len(first.written) == 1
    gone_request = request_for(gone, "k-gone")
    gone.delete()  # the account is deleted while its checkout waits in the queue
    producer = Producer(client_config(acks="all"))
    for request in (request_for(alice, "k-1"), gone_request, request_for(bob, "k-2")):  # k-1 again: a new id
        producer.produce(queue_topic, key=SKU, value=request.to_json())
    assert producer.flush(10) == 0

    writer = drain(2)

    assert Order.objects.filter(customer=alice).count() == 1 and Order.objects.filter(customer=bob).count() == 1
    assert writer.skipped == 1
    assert stock() == (98, 2)


def request_for(customer, key: str) -> QueuedRequest:
    return QueuedRequest(
        order_id=allocate_order_id(),
        customer_id=customer.id,
        idempotency_key=key,
        request_hash="h",
        currency="EUR",
        lines=[QueuedLine(SKU, "Flash", 1, 500)],
        queue_sku=SKU,
    )


def produce_requests(topic: str, customers: list, per_customer: int) -> int:
    producer = Producer(client_config(acks="all"))
    count = 0
    for customer in customers:
        for n in range(per_customer):
            request = QueuedRequest(
                order_id=allocate_order_id(),
                customer_id=customer.id,
                idempotency_key=f"kill-{n}",
                request_hash="h",
                currency="EUR",
                lines=[QueuedLine(SKU, "Flash", 1, 500)],
            )
            producer.produce(topic, key=SKU, value=request.to_json())
            count += 1
        producer.poll(0)
    assert producer.flush(30) == 0
    return count


def start_writer(tmp_path, topic: str) -> subprocess.Popen:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "KAFKA_CHECKOUT_TOPIC": topic,
        "KAFKA_CONSUMER_GROUP_PREFIX": f"{topic}.",
        "QUEUE_BATCH_SIZE": "100",
        "LOG_FORMAT": "plain",
    }
    log = open(tmp_path / "writer.log", "a")
    return subprocess.Popen(
        [sys.executable, "manage.py", "write_queued_orders"],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.slow
def test_a_writer_killed_mid_batch_loses_nothing_and_writes_nothing_twice(queue_topic, tmp_path):
    queue_sale(10_000)
    customers = UserFactory.create_batch(40)
    total = produce_requests(queue_topic, customers, per_customer=100)  # 4,000 admitted requests

    writer = start_writer(tmp_path, queue_topic)
    try:
        assert wait_until(lambda: Order.objects.count() > 0, 60), (tmp_path / "writer.log").read_text()[-2000:]
        writer.send_signal(signal.SIGKILL)  # somewhere in the middle of the queue
        writer.wait(timeout=10)
        killed_at = Order.objects.count()
        writer = start_writer(tmp_path, queue_topic)
        assert wait_until(lambda: Order.objects.count() >= total, 90), (tmp_path / "writer.log").read_text()[-2000:]
        time.sleep(1)  # anything redelivered after the last batch would show now
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(timeout=20)

    assert killed_at < total  # the kill did land mid-queue
    assert Order.objects.count() == total
    assert Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).count() == total
    assert OutboxEvent.objects.filter(event_type="OrderCreated").count() == total
    assert stock() == (10_000 - total, total)
