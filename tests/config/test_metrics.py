"""config/metrics.py (GET /metrics) and core/metrics.py: who may read them, every
app's counters and the live gauges read at scrape time."""

import pytest
from django.db import transaction
from prometheus_client import REGISTRY

from outbox.services import record_event
from tests.factories import product_with_stock
from tests.helpers import checkout, fill_cart, wall_clock_ahead

pytestmark = pytest.mark.django_db


METRICS_TOKEN = "metrics-token-for-the-tests-0123456789"


@pytest.fixture(autouse=True)
def metrics_readable(settings, monkeypatch):
    settings.METRICS_TOKEN = METRICS_TOKEN
    monkeypatch.setattr("config.metrics.LIVE_CACHE_SECONDS", 0)  # every scrape reads afresh


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


def test_backlog_gauge_grows_while_nothing_relays(client, monkeypatch):
    text = scrape(client)
    assert gauge(text, "shop_outbox_backlog") == 0 and gauge(text, "shop_outbox_oldest_age_seconds") == 0
    for _ in range(3):
        with transaction.atomic():
            record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
    wall_clock_ahead(monkeypatch, 90)  # the oldest has waited a minute and a half
    text = scrape(client)
    assert gauge(text, "shop_outbox_backlog") == 3
    assert 90 <= gauge(text, "shop_outbox_oldest_age_seconds") < 100


def test_a_process_serves_its_own_metrics_only_with_a_metrics_port(settings, monkeypatch):
    from core import metrics

    served = []
    monkeypatch.setattr(metrics, "start_http_server", lambda port, registry: served.append(port))
    settings.METRICS_PORT = 0
    metrics.serve_own_metrics()
    settings.METRICS_PORT = 9101
    metrics.serve_own_metrics()
    assert served == [9101]


@pytest.mark.parametrize(
    "debug,token,sent,status",
    [
        (False, "", None, 404),  # production without a token: nobody
        (True, "", None, 200),  # development: open
        (False, "s3cret-metrics-token", None, 404),
        (False, "s3cret-metrics-token", "Bearer wrong", 404),
        (False, "s3cret-metrics-token", "Bearer s3cret-metrics-token", 200),
    ],
)
def test_who_may_read_metrics(client, settings, debug, token, sent, status):
    settings.DEBUG, settings.METRICS_TOKEN = debug, token
    headers = {"HTTP_AUTHORIZATION": sent} if sent else {}
    assert client.get("/metrics", **headers).status_code == status
