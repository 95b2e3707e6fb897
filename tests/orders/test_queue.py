"""Queue-mode flash sales, on the real broker: 202 -> QUEUED -> written in
batches by the writer, replays, rejections, Kafka down, a writer killed."""

import os
import signal
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from redis.exceptions import ConnectionError as RedisConnectionError

from cart.storage import cart_key, taken_key
from core.kafka import client_config, consumer_group
from inventory import gate
from inventory.services.flash_sales import set_flash_sale_mode
from orders.models import Order, OrderStatus
from orders.queue_writer import WRITER_GROUP, QueueWriter
from orders.services import expire_unpaid_orders, place_order, queue_admission, queue_writing
from orders.services.builder import OrderDraft, PricedLine
from orders.services.queue_admission import QueuedRequest, allocate_order_id, queue_depths
from orders.services.queue_writing import write_batch
from outbox.models import OutboxEvent
from tests.factories import SHIPPING_ADDRESS, UserFactory, product_with_stock
from tests.helpers import (
    expire_now,
    fill_cart,
    post_webhook,
    run_in_threads,
    run_until_stopped,
    shopper_client,
    wait_until,
    wall_clock_ahead,
)
from tests.orders.conftest import SKU, checkout, drain, queue_sale, shopper_with_cart, stock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka, pytest.mark.usefixtures("queue_topic")]


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
    assert redis.hlen(cart_key(client.user.id)) == 0  # taken by the checkout, for a retry or to be given back
    assert redis.hget(taken_key(client.user.id), SKU) == b"1"
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


def test_an_admitted_queued_checkout_confirms_its_key_in_one_lookup_and_takes_ids_a_hundred_at_a_time(redis):
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
    # Redis may have forgotten a key: each admitted checkout asks the unique (customer, key) index, once.
    lookups = [query["sql"] for query in captured.captured_queries]
    assert len(lookups) == 5
    assert all('"orders"."idempotency_key" = \'cold\'' in sql and "LIMIT 1" in sql for sql in lookups)
    # ... and no statement for their ids: the block the first checkout took hands them out, in order.
    ids = sorted(int(raw) for raw in redis.mget([queue_admission.request_key(c.id, "cold") for c in customers[1:]]))
    assert ids == list(range(ids[0], ids[0] + 5))


def test_ids_are_handed_out_once_across_threads_and_never_by_a_forked_child(monkeypatch):
    block = queue_admission._IdBlock()
    taken = run_in_threads([lambda: [block.take() for _ in range(60)] for _ in range(8)])  # 480 ids, 5 blocks
    ids = [i for batch in taken for i in batch]
    assert len(set(ids)) == len(ids) == 480
    monkeypatch.setattr(queue_admission.os, "getpid", lambda: -1)  # as a child forked after the parent took a block
    child = block.take()
    assert child > max(ids)  # a block of its own, from the sequence: none of the parent's left-overs


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


def forget_the_key(redis, client, key: str) -> None:
    """What a Redis restart without persistence loses of a checkout: the gate's
    replay marker and the queue's record of the key."""
    assert redis.delete(gate.replay_key(client.user.id, key), queue_admission.request_key(client.user.id, key)) >= 1


def test_a_key_redis_forgot_is_confirmed_against_the_database(redis):
    queue_sale(10)
    client = shopper_with_cart(redis)
    first = checkout(client, "q-lost")
    drain(1)
    forget_the_key(redis, client, "q-lost")
    fill_cart(redis, client.user.id, {SKU: 1})

    again = checkout(client, "q-lost")

    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"] and again.json()["status"] == OrderStatus.PENDING_PAYMENT
    assert client.get(f"/api/orders/{first.json()['id']}").status_code == 200
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 9  # the retry's units went back
    assert Order.objects.count() == 1 and stock() == (9, 1)
    assert queue_depths() == {SKU: 0} and not redis.keys("queue:order:*")


@pytest.mark.parametrize("batch_size", [500, 1], ids=["one batch", "a batch each"])
def test_a_retry_queued_twice_leads_to_the_order_written_first(redis, settings, batch_size):
    """Redis forgot the key while the first request was still in the queue: the
    retry is queued under a new id, and the writer makes that id lead to the order,
    whether it meets the first in its batch or finds it written by an earlier one."""
    settings.QUEUE_BATCH_SIZE = batch_size
    queue_sale(10)
    client = shopper_with_cart(redis)
    first = checkout(client, "q-twice-queued")
    forget_the_key(redis, client, "q-twice-queued")
    fill_cart(redis, client.user.id, {SKU: 1})
    retry = checkout(client, "q-twice-queued")
    assert retry.status_code == 202 and retry.json()["id"] != first.json()["id"]
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 8

    drain(1)  # until both requests are handled: neither is pending any more

    assert Order.objects.count() == 1 and stock() == (9, 1)
    shown = client.get(f"/api/orders/{retry.json()['id']}")
    assert shown.status_code == 200 and shown.json()["id"] == first.json()["id"]
    assert shown.json()["status"] == OrderStatus.PENDING_PAYMENT
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 9  # the duplicate's unit went back, once
    assert queue_depths() == {SKU: 0} and not redis.keys("queue:order:*")
    assert shopper_client(UserFactory()).get(f"/api/orders/{retry.json()['id']}").status_code == 404


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


def test_the_clean_up_goes_in_small_calls_and_still_cleans_up_every_request(redis, monkeypatch):
    """One script over a whole batch held Redis for milliseconds (every admission waited): the
    writer's clean-up goes CLEAN_UP_CHUNK requests at a time, here 2, across written and rejected."""
    monkeypatch.setattr(queue_writing, "CLEAN_UP_CHUNK", 2)
    done_calls = []
    real_run_script = queue_writing.run_script

    def run_script(source, *, keys, args, alias="default"):
        if source is queue_writing._DONE:
            done_calls.append(len(keys) // 5)  # five keys per request (queue_done.lua)
        return real_run_script(source, keys=keys, args=args, alias=alias)

    monkeypatch.setattr(queue_writing, "run_script", run_script)
    queue_sale(2)
    gate.set_counter(sku=SKU, remaining=6, reset_customers=False)  # the gate drifted: 3 of 5 are rejected
    clients = [shopper_with_cart(redis) for _ in range(5)]
    ids = [checkout(client, f"q-chunk-{n}").json()["id"] for n, client in enumerate(clients)]

    drain(5)

    assert sum(done_calls) == 5 and max(done_calls) == 2  # however the writer batched the five
    assert queue_depths() == {SKU: 0}
    assert not redis.keys("queue:order:*")
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 6 - 5 + 3  # each rejected one's unit back, once
    written = dict(Order.objects.values_list("id", "status"))
    for client, order_id in zip(clients, ids, strict=True):
        if written[order_id] == OrderStatus.REJECTED:
            assert redis.hlen(cart_key(client.user.id)) == 1  # the cart given back
        else:
            assert redis.exists(gate.replay_key(client.user.id, f"q-chunk-{ids.index(order_id)}"))


def test_twin_requests_under_one_key_hand_off_one_order(redis):
    """queue_hand_off.lua: two requests with the same key at the same moment (a double click) both pass
    the database check; the script records the first and answers the second with its id."""
    queue_sale(10)
    customer = UserFactory()
    draft = OrderDraft(customer.id, "q-twin", [PricedLine(SKU, "Flash", 1, 500)], "EUR", SHIPPING_ADDRESS, 900)
    answers = run_in_threads(
        [lambda: queue_admission.queue_checkout(draft=draft, gated={}, partition_key=SKU) for _ in range(2)]
    )

    assert {order.id for order, _ in answers} == {int(redis.get(queue_admission.request_key(customer.id, "q-twin")))}
    assert sorted(replayed for _, replayed in answers) == [False, True]
    assert len(redis.keys("queue:order:*")) == 1 and queue_depths() == {SKU: 1}


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
        lines=[PricedLine(SKU, "Flash", 1, 500)],
        queue_sku=SKU,
    )


def produce_requests(topic: str, customers: list, per_customer: int) -> tuple[int, dict[int, int]]:
    """How many requests were produced, and each partition's end offset after them
    (from the broker's acknowledgements: the development broker's watermarks are loose)."""
    producer = Producer(client_config(acks="all"))
    count, ends = 0, {}

    def acknowledged(error, message) -> None:
        if error is None:
            ends[message.partition()] = max(ends.get(message.partition(), 0), message.offset() + 1)

    for customer in customers:
        for n in range(per_customer):
            request = QueuedRequest(
                order_id=allocate_order_id(),
                customer_id=customer.id,
                idempotency_key=f"kill-{n}",
                request_hash="h",
                currency="EUR",
                lines=[PricedLine(SKU, "Flash", 1, 500)],
            )
            producer.produce(topic, key=SKU, value=request.to_json(), on_delivery=acknowledged)
            count += 1
        producer.poll(0)
    assert producer.flush(30) == 0
    return count, ends


def committed_by_the_writers(topic: str) -> dict[int, int]:
    """The writers' group's committed offsets on `topic`, by partition (where it committed any)."""
    consumer = Consumer(client_config(**{"group.id": consumer_group(WRITER_GROUP), "enable.auto.commit": False}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
    finally:
        consumer.close()


def start_writer(tmp_path, topic: str, **extra_env: str) -> subprocess.Popen:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "KAFKA_CHECKOUT_TOPIC": topic,
        "KAFKA_CONSUMER_GROUP_PREFIX": f"{topic}.",
        "QUEUE_BATCH_SIZE": "100",
        "LOG_FORMAT": "plain",
        **extra_env,
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
    total, ends = produce_requests(queue_topic, customers, per_customer=100)  # 4,000 admitted requests

    writer = start_writer(tmp_path, queue_topic)
    try:
        assert wait_until(lambda: Order.objects.count() > 0, 60), (tmp_path / "writer.log").read_text()[-2000:]
        writer.send_signal(signal.SIGKILL)  # somewhere in the middle of the queue
        writer.wait(timeout=10)
        killed_at = Order.objects.count()
        writer = start_writer(tmp_path, queue_topic)
        assert wait_until(lambda: Order.objects.count() >= total, 90), (tmp_path / "writer.log").read_text()[-2000:]
        # Every request read, written and its batch committed: what the killed writer
        # left (redelivered to this one) was handled, and nothing is left to come again.
        assert wait_until(lambda: committed_by_the_writers(queue_topic) == ends, 30), (
            tmp_path / "writer.log"
        ).read_text()[-2000:]
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(timeout=20)

    assert killed_at < total  # the kill did land mid-queue
    assert Order.objects.count() == total
    assert Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).count() == total
    assert OutboxEvent.objects.filter(event_type="OrderCreated").count() == total
    assert stock() == (10_000 - total, total)


@pytest.mark.slow
def test_a_writer_killed_between_commit_and_clean_up_cleans_up_on_redelivery(redis, queue_topic, tmp_path, capsys):
    queue_sale(100)
    clients = [shopper_with_cart(redis) for _ in range(20)]
    for n, client in enumerate(clients):
        assert checkout(client, f"kc-{n}").status_code == 202

    writer = start_writer(tmp_path, queue_topic, QUEUE_WRITER_DRILL="kill-after-commit")
    try:
        assert writer.wait(timeout=60) == -signal.SIGKILL, (tmp_path / "writer.log").read_text()[-2000:]
    finally:
        writer.kill()
    written = Order.objects.count()
    assert written > 0 and len(redis.keys("queue:order:*")) == 20  # committed, nothing cleaned up
    assert all(redis.hlen(cart_key(client.user.id)) == 0 for client in clients)  # taken at admission

    writer = start_writer(tmp_path, queue_topic)
    try:
        assert wait_until(lambda: Order.objects.count() == 20 and queue_depths() == {SKU: 0}, 60), (
            tmp_path / "writer.log"
        ).read_text()[-2000:]
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(timeout=20)

    assert not redis.keys("queue:order:*")
    assert all(redis.hlen(cart_key(client.user.id)) == 0 for client in clients)
    assert all(redis.exists(gate.replay_key(client.user.id, f"kc-{n}")) for n, client in enumerate(clients))
    assert stock() == (80, 20) and gate.counters(skus=[SKU])[SKU]["remaining"] == 80
    call_command("shop_status")
    assert "queued (not yet written) 0" in capsys.readouterr().out


def test_a_redis_error_in_the_clean_up_keeps_the_batch_until_the_clean_up_is_done(redis, monkeypatch):
    queue_sale(10)
    client = shopper_with_cart(redis)
    assert checkout(client, "q-clean-up").status_code == 202
    real, calls = queue_writing.clean_up, []

    def clean_up(outcomes, **kwargs):
        calls.append(len(outcomes))
        if len(calls) == 1:
            raise RedisConnectionError("Redis went away after the commit")
        real(outcomes, **kwargs)

    monkeypatch.setattr(queue_writing, "clean_up", clean_up)
    stop = threading.Event()
    thread = run_until_stopped(QueueWriter(), stop)
    try:
        assert wait_until(lambda: queue_depths() == {SKU: 0}, 30)
    finally:
        stop.set()
        thread.join(30)

    assert calls == [1, 1]  # the batch came again, found its order written, and cleaned up
    assert Order.objects.count() == 1 and stock() == (9, 1)
    assert redis.hlen(cart_key(client.user.id)) == 0 and not redis.keys("queue:order:*")
    assert redis.exists(gate.replay_key(client.user.id, "q-clean-up"))


def run_in_thread(function) -> threading.Thread:
    def run() -> None:
        try:
            function()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _committed(writer: QueueWriter) -> int:
    return sum(max(tp.offset, 0) for tp in writer.consumer.committed(writer.consumer.assignment(), timeout=10))


def test_a_batch_is_cleaned_up_while_the_next_is_written_and_its_offsets_wait_for_its_clean_up(
    redis, settings, monkeypatch
):
    settings.QUEUE_BATCH_SIZE = 1  # a batch per checkout
    queue_sale(10)
    clients = [shopper_with_cart(redis) for _ in range(2)]
    for n, client in enumerate(clients):
        assert checkout(client, f"q-overlap-{n}").status_code == 202
    real, cleaning, release = queue_writing.clean_up, threading.Event(), threading.Event()

    def clean_up(outcomes, **kwargs):
        cleaning.set()
        assert release.wait(30)
        real(outcomes, **kwargs)

    monkeypatch.setattr(queue_writing, "clean_up", clean_up)
    writer, second = QueueWriter(), None
    try:
        assert wait_until(lambda: writer.run_once() == 1, 30) and cleaning.wait(30)
        second = run_in_thread(writer.run_once)  # writes the second batch, then waits for the first's clean-up
        assert wait_until(lambda: Order.objects.count() == 2, 30)
        assert _committed(writer) == 0 and queue_depths() == {SKU: 2}  # the first batch is not cleaned up yet
        release.set()
        second.join(30)
        assert _committed(writer) == 1  # the first batch's offset, once it was cleaned up
        assert writer.run_once() == 0  # nothing new: the second batch's clean-up is waited for, its offset committed
        assert _committed(writer) == 2 and queue_depths() == {SKU: 0}
    finally:
        release.set()
        if second is not None:
            second.join(30)
        writer.close()
    assert all(redis.hlen(cart_key(client.user.id)) == 0 for client in clients)


def test_a_failed_clean_up_found_after_the_next_batch_was_written_brings_both_batches_again(
    redis, settings, monkeypatch
):
    settings.QUEUE_BATCH_SIZE = 1
    queue_sale(10)
    clients = [shopper_with_cart(redis) for _ in range(2)]
    for n, client in enumerate(clients):
        assert checkout(client, f"q-again-{n}").status_code == 202
    real, calls = queue_writing.clean_up, []

    def clean_up(outcomes, **kwargs):
        calls.append([request.idempotency_key for request, _, _ in outcomes])
        if len(calls) == 1:
            raise RedisConnectionError("Redis went away after the commit")
        real(outcomes, **kwargs)

    monkeypatch.setattr(queue_writing, "clean_up", clean_up)
    writer = QueueWriter()
    try:
        assert wait_until(lambda: writer.run_once() == 1, 30)
        with pytest.raises(RedisConnectionError):
            writer.run_once()  # the second batch is written, then the first's clean-up is found failed
        assert Order.objects.count() == 2 and _committed(writer) == 0
        assert wait_until(lambda: writer.run_once() == 0 and queue_depths() == {SKU: 0}, 30)
    finally:
        writer.close()
    assert calls == [["q-again-0"], ["q-again-0"], ["q-again-1"]]  # both came again, each cleaned up once
    assert Order.objects.count() == 2 and stock() == (8, 2)


def test_a_queued_request_never_written_is_counted_as_stale(redis, settings, capsys, monkeypatch):
    """The broker acknowledged it and then lost it (the development broker keeps
    its log in memory): the shop says so instead of showing QUEUED for ever."""
    queue_sale(10)
    settings.QUEUE_STALE_AFTER_SECONDS = 60  # far from the test's own pace: a slow machine is not "stale"
    client = shopper_with_cart(redis)
    assert checkout(client, "q-lost-message").status_code == 202
    assert queue_admission.stale_queued() == {SKU: 0}

    wall_clock_ahead(monkeypatch, 61, queue_admission)  # past the bound, and no writer ran

    assert queue_admission.stale_queued() == {SKU: 1}
    call_command("shop_status")
    assert "STALE 1" in capsys.readouterr().out
    drain(1)
    assert queue_admission.stale_queued() == {SKU: 0} and queue_depths() == {SKU: 0}


def test_the_writer_builds_the_order_checkout_builds_from_the_same_cart(redis):
    """One order builder (orders/services/builder.py) for both paths: the same
    shopper and cart, once in direct mode and once through the queue, give the
    same order, items and event, but for ids, keys and clocks, and the holds
    (the queue's orders are bounded by the sale's gate, not by unpaid holds)."""
    queue_sale(10, mode="direct")
    client = shopper_with_cart(redis, {SKU: 2})
    direct = checkout(client, "same-cart-direct")
    assert direct.status_code == 201
    set_flash_sale_mode(sku=SKU, mode="queue")
    fill_cart(redis, client.user.id, {SKU: 2})
    queued = checkout(client, "same-cart-queued")
    assert queued.status_code == 202
    drain(2)

    def written(order_id: int) -> dict:
        order = Order.objects.get(id=order_id)
        values = {f.attname: getattr(order, f.attname) for f in Order._meta.concrete_fields}
        for name in ("id", "idempotency_key", "created_at", "expires_at", "holds_units"):
            values.pop(name)
        [event] = OutboxEvent.objects.filter(aggregate_type="order", aggregate_id=str(order_id))
        payload = {k: v for k, v in event.payload.items() if k not in ("order_id", "expires_at")}
        return {
            "order": values,
            "payment window": order.expires_at - order.created_at,
            "items": list(order.items.values("product_id", "name", "quantity", "unit_price")),
            "event": (event.event_type, payload, event.payload["order_id"] == order_id),
        }

    by_checkout, by_writer = written(direct.json()["id"]), written(queued.json()["id"])
    assert by_checkout == by_writer
    assert by_checkout["order"]["total_amount"] == 1000 and by_checkout["order"]["shipping_address"]
    assert by_checkout["order"]["status"] == OrderStatus.PENDING_PAYMENT
    assert Order.objects.get(id=direct.json()["id"]).holds_units
    assert not Order.objects.get(id=queued.json()["id"]).holds_units
