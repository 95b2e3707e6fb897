import json
import logging

import pytest
from django.core.management import call_command
from django.db import transaction
from prometheus_client import REGISTRY

from core.requestid import RequestIdFilter
from outbox.models import OutboxEvent
from outbox.services import record_event
from tests.factories import product_with_stock
from tests.orders.conftest import checkout, fill_cart, shopper_client

pytestmark = pytest.mark.django_db


METRICS_TOKEN = "metrics-token-for-the-tests-0123456789"


@pytest.fixture(autouse=True)
def metrics_readable(settings, monkeypatch):
    settings.METRICS_TOKEN = METRICS_TOKEN
    monkeypatch.setattr("config.metrics.LIVE_CACHE_SECONDS", 0)  # every scrape reads afresh


@pytest.fixture
def shopper(db):
    return shopper_client()


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(client) -> str:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    return response.content.decode()


def gauge(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_metrics_endpoint_lists_the_shop_metrics(client):
    text = scrape(client)
    for name in (
        "shop_http_requests_total",
        "shop_orders_created_total",
        "shop_checkout_refusals_total",
        "shop_outbox_backlog",
        "shop_outbox_oldest_age_seconds",
        "shop_relay_published_total",
        "shop_consumer_events_total",
    ):
        assert f"# TYPE {name}" in text, name


def test_checkout_moves_orders_created_and_refusals(shopper, redis):
    product_with_stock(sku="A", available=1)
    created = sample("shop_orders_created_total")
    refused = sample("shop_checkout_refusals_total", reason="out_of_stock")
    fill_cart(redis, shopper.user.id, {"A": 1})
    assert checkout(shopper, key="one").status_code == 201
    assert checkout(shopper, key="one").status_code == 200  # a replay is not a new order
    assert sample("shop_orders_created_total") == created + 1
    fill_cart(redis, shopper.user.id, {"A": 1})
    assert checkout(shopper, key="two").status_code == 409
    assert sample("shop_checkout_refusals_total", reason="out_of_stock") == refused + 1


def test_rate_limited_checkout_is_counted(shopper, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "checkout": "1/min"}
    before = sample("shop_checkout_refusals_total", reason="rate_limited")
    checkout(shopper, key="a")
    assert checkout(shopper, key="b").status_code == 429
    assert sample("shop_checkout_refusals_total", reason="rate_limited") == before + 1


def test_backlog_gauge_grows_while_nothing_relays(client):
    assert gauge(scrape(client), "shop_outbox_backlog") == 0
    for _ in range(3):
        with transaction.atomic():
            record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
    text = scrape(client)
    assert gauge(text, "shop_outbox_backlog") == 3
    assert gauge(text, "shop_outbox_oldest_age_seconds") >= 0


def test_request_id_is_returned_logged_once_and_carried_into_the_outbox(shopper, redis, caplog):
    product_with_stock(sku="A", available=5)
    fill_cart(redis, shopper.user.id, {"A": 1})
    with caplog.at_level(logging.INFO, logger="shop.access"):
        response = shopper.post("/api/orders", HTTP_IDEMPOTENCY_KEY="rid", HTTP_X_REQUEST_ID="trace-123")
    assert response.status_code == 201
    assert response["X-Request-ID"] == "trace-123"
    access = [r for r in caplog.records if r.name == "shop.access"]
    assert len(access) == 1
    assert (access[0].status, access[0].route, access[0].method) == (201, "api/orders", "POST")
    [event] = OutboxEvent.objects.filter(event_type="OrderCreated")
    assert event.request_id == "trace-123"


def test_request_id_is_made_up_when_missing_or_unsafe(client):
    generated = client.get("/healthz")["X-Request-ID"]
    assert len(generated) == 32
    unsafe = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\nwith newline")["X-Request-ID"]
    assert unsafe != "bad id\nwith newline" and len(unsafe) == 32


def test_log_lines_are_json_with_the_request_id():
    from django.conf import settings
    from pythonjsonlogger.json import JsonFormatter

    config = settings.LOGGING["formatters"]["json"]
    formatter = JsonFormatter(config["fmt"], rename_fields=config["rename_fields"])
    record = logging.LogRecord("shop.access", logging.INFO, __file__, 1, "GET /healthz 200", None, None)
    record.status = 200
    from core.requestid import request_id_var

    token = request_id_var.set("abc")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)
    line = json.loads(formatter.format(record))
    assert line["request_id"] == "abc" and line["level"] == "INFO" and line["status"] == 200


def test_shop_status_prints_one_screen(capsys, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # Kafka down: the rest still shows
    with transaction.atomic():
        record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
    call_command("shop_status")
    out = capsys.readouterr().out
    assert "outbox waiting for Kafka: 1" in out
    assert "unavailable" in out
