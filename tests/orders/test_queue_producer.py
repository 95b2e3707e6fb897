"""The queue's producer when its broker fails: 503s while it is down (refused at
once once the breaker is open, so the rest of the shop keeps its threads), 202s
again soon after it answers, in the same process, and never a 500 or a 202 the
broker did not take. On a broker of the test's own, killed and restarted."""

import threading
import time
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from inventory import gate
from orders.models import Order, OrderStatus
from orders.queue_producer import Breaker, forget_queue_producer, queue_producer
from orders.services.queue_admission import queue_depths
from outbox.topics import ensure_topics
from tests.factories import product_with_stock
from tests.helpers import fill_cart, free_port, shopper_client, start_broker
from tests.orders.conftest import SKU, checkout, drain, queue_sale, shopper_with_cart

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka, pytest.mark.usefixtures("queue_topic")]


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("shop_queue_unavailable_total", {"reason": reason}) or 0.0


def test_the_breaker_lets_one_trial_through_after_its_open_period(monkeypatch):
    clock = SimpleNamespace(now=1000.0)  # the breaker's monotonic clock, moved by hand
    monkeypatch.setattr("orders.queue_producer.time", SimpleNamespace(monotonic=lambda: clock.now))
    breaker = Breaker(open_seconds=0.25)
    assert breaker.allow() and breaker.allow()  # closed
    breaker.failed()
    clock.now += 0.125
    assert not breaker.allow()
    clock.now += 0.125
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # only one at a time
    breaker.failed()
    assert not breaker.allow()
    clock.now += 0.25
    assert breaker.allow()
    breaker.succeeded()
    assert breaker.allow() and breaker.allow() and not breaker.is_open


def test_while_the_broker_is_down_queue_checkouts_are_refused_at_once_and_direct_ones_go_on(redis, settings):
    queue_sale(10)
    product_with_stock(sku="REGULAR", available=5)
    settings.KAFKA_BOOTSTRAP_SERVERS = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings.QUEUE_ADMIT_TIMEOUT_MS = 300
    forget_queue_producer()
    at_once, waited = refused("breaker_open"), refused("broker_error")

    answers = [checkout(shopper_with_cart(redis), f"down-{n}") for n in range(10)]

    assert {a.status_code for a in answers} == {503}
    assert {a.json()["error"]["code"] for a in answers} == {"queue_unavailable"}
    assert refused("broker_error") - waited == 1  # one request waited for the broker...
    assert refused("breaker_open") - at_once == 9  # ...the others were refused without touching Kafka
    assert queue_producer().breaker.is_open
    buyer = shopper_with_cart(redis)
    checkout(buyer, "warm")  # its token cached
    with CaptureQueriesContext(connection) as captured:
        assert checkout(buyer, "while-open").status_code == 503
    assert captured.captured_queries == []  # refused before the gate, the address and the prices
    assert gate.counters(skus=[SKU])[SKU]["remaining"] == 10
    assert not redis.keys("queue:key:*") and not redis.keys("queue:order:*") and queue_depths() == {SKU: 0}
    assert checkout(shopper_with_cart(redis, {"REGULAR": 1}), "direct").status_code == 201


@pytest.mark.slow
def test_a_broker_restart_under_queue_checkouts_costs_503s_only_while_down(redis, settings, queue_topic, tmp_path):
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    broker = start_broker(port, log)
    try:
        settings.KAFKA_BOOTSTRAP_SERVERS = f"127.0.0.1:{port}"
        ensure_topics(topics=[queue_topic])
        forget_queue_producer()
        queue_sale(1000)
        clients = [shopper_client() for _ in range(4)]
        answers: list[tuple[int, int | None]] = []  # (status, order id)
        tries = iter(range(10**6))
        lock = threading.Lock()

        def attempt(client) -> int:
            with lock:
                n = next(tries)
            fill_cart(redis, client.user.id, {SKU: 1})
            response = checkout(client, f"restart-{n}")
            with lock:
                answers.append((response.status_code, response.json().get("id")))
            return response.status_code

        def shoppers_for(seconds: float) -> None:
            """Four shoppers checking out again and again, each in a thread of its own."""

            def shop(client) -> None:
                try:
                    deadline = time.monotonic() + seconds
                    while time.monotonic() < deadline:
                        attempt(client)
                finally:
                    connection.close()

            threads = [threading.Thread(target=shop, args=(client,)) for client in clients]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=seconds + 30)

        for client in clients:
            assert attempt(client) == 202
        drain(4)  # the development broker keeps its log in memory: written before it goes

        broker.kill()
        broker.wait(10)
        before_outage = len(answers)
        shoppers_for(3.0)
        during = [status for status, _ in answers[before_outage:]]
        assert during and set(during) == {503}

        broker = start_broker(port, log)  # the same address, empty
        ensure_topics(topics=[queue_topic])
        answering = time.monotonic()
        while attempt(clients[0]) != 202:
            assert time.monotonic() - answering < 10, "no 202 within 10 s of the broker answering"
        back_after = time.monotonic() - answering
        shoppers_for(2.0)

        accepted = [order_id for status, order_id in answers if status == 202]
        assert {status for status, _ in answers} <= {202, 503}  # never a 500
        drain(len(accepted))
        written = set(Order.objects.filter(id__in=accepted).values_list("id", flat=True))
        assert written == set(accepted)  # every 202 was written
        assert Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).count() == len(accepted)
        assert gate.counters(skus=[SKU])[SKU]["remaining"] == 1000 - len(accepted)  # every 503 gave its unit back
        print(
            f"\n{len(during)} answers while down (all 503), first 202 {back_after:.1f} s after the broker answered, "
            f"{len(accepted)} orders written"
        )
    finally:
        broker.kill()
        broker.wait(10)
