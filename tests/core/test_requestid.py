"""core/requestid.py: every request has an id (given or made up) that the response,
the log lines and the outbox events carry, and one access-log line and metric sample."""

import json
import logging

import pytest
from prometheus_client import REGISTRY

from core.requestid import RequestIdFilter
from outbox.models import OutboxEvent
from tests.factories import product_with_stock
from tests.helpers import fill_cart

pytestmark = pytest.mark.django_db


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


def test_made_up_http_methods_share_one_metric_series(client):
    labels = {"route": "healthz", "method": "other", "status": "200"}
    before = REGISTRY.get_sample_value("shop_http_requests_total", labels) or 0
    for method in ("FOO", "BAR", "X" * 100):
        assert client.generic(method, "/healthz").status_code == 200
    assert REGISTRY.get_sample_value("shop_http_requests_total", labels) == before + 3
    methods = {
        sample.labels.get("method")
        for metric in REGISTRY.collect()
        if metric.name.startswith("shop_http_request")
        for sample in metric.samples
    }
    assert not methods & {"FOO", "BAR", "X" * 100}
