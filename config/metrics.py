"""Prometheus metrics.

Counters live in each process. Under gunicorn, Celery, the relay and the
consumers started by `make run` they share PROMETHEUS_MULTIPROC_DIR, so
GET /metrics on any web worker shows every process of the host added up.
Processes on other hosts (containers) expose their own with METRICS_PORT.
Figures that are state, not events (outbox backlog, gate counters), are read
live from PostgreSQL and Redis at scrape time, at most once in LIVE_CACHE_SECONDS
per process.

Who may read /metrics: with METRICS_TOKEN set, only a request with
`Authorization: Bearer <token>` (Prometheus' `authorization` setting); without
it, anyone in development, and nobody (404) with DEBUG off. Relay and consumers
serve theirs on METRICS_PORT, which belongs on an internal address.
"""

import hmac
import os
import threading
import time

# The directory must exist before the first metric is created (in the image it is a tmpfs path).
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily

REQUESTS = Counter("shop_http_requests_total", "HTTP requests", ["route", "method", "status"])
REQUEST_SECONDS = Histogram(
    "shop_http_request_duration_seconds",
    "HTTP request latency",
    ["route", "method"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
ORDERS_CREATED = Counter("shop_orders_created_total", "Orders created by checkout")
CHECKOUT_REFUSALS = Counter("shop_checkout_refusals_total", "Checkouts turned away", ["reason"])
IDEMPOTENT_REPLAYS = Counter("shop_idempotent_replays_total", "Checkouts answered with an existing order")
PAYMENTS = Counter("shop_payments_total", "Payment webhooks applied", ["outcome"])
REFUNDS_REQUESTED = Counter("shop_refunds_requested_total", "Refunds requested", ["reason"])
ORDERS_EXPIRED = Counter("shop_orders_expired_total", "Unpaid orders cancelled at their deadline")
RELAY_PUBLISHED = Counter("shop_relay_published_total", "Outbox events acknowledged by Kafka")
RELAY_FAILURES = Counter("shop_relay_failures_total", "Outbox events not delivered in a batch")
CONSUMER_EVENTS = Counter(
    "shop_consumer_events_total", "Events seen by consumers", ["consumer", "result"]
)  # result: processed | duplicate | ignored | dead_lettered
CONSUMER_WAITING = Gauge(
    "shop_consumer_waiting",
    "1 while a consumer keeps a message because PostgreSQL, Redis or the network is down",
    ["consumer"],
    multiprocess_mode="livemax",
)


LIVE_CACHE_SECONDS = 5.0


class LiveStateCollector:
    """State read at scrape time: outbox backlog and gate counters. Kept for
    LIVE_CACHE_SECONDS, so that frequent scrapes do not count the queue each time."""

    _lock = threading.Lock()
    _cached: tuple[float, list] | None = None

    def collect(self):
        with self._lock:
            cached = LiveStateCollector._cached
            if cached is None or time.monotonic() - cached[0] > LIVE_CACHE_SECONDS:
                cached = LiveStateCollector._cached = (time.monotonic(), list(self._read()))
        yield from cached[1]

    def _read(self):
        from django.utils import timezone

        from inventory import gate
        from inventory.models import FlashSale
        from outbox.services import backlog

        waiting = GaugeMetricFamily("shop_outbox_backlog", "Outbox events waiting for Kafka")
        oldest = GaugeMetricFamily("shop_outbox_oldest_age_seconds", "Age of the oldest waiting outbox event")
        gate_remaining = GaugeMetricFamily(
            "shop_gate_remaining", "Units the flash-sale gate still admits", labels=["sku"]
        )
        try:
            count, oldest_at = backlog()
            waiting.add_metric([], count)
            oldest.add_metric([], (timezone.now() - oldest_at).total_seconds() if oldest_at else 0)
            skus = list(FlashSale.objects.values_list("product_id", flat=True))
            for sku, counter in gate.counters(skus=skus).items():
                if counter["remaining"] is not None:
                    gate_remaining.add_metric([sku], counter["remaining"])
        except Exception:  # a scrape must answer even with PostgreSQL or Redis down
            pass
        yield waiting
        yield oldest
        yield gate_remaining


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_allowed(request) -> bool:
    from django.conf import settings

    token = settings.METRICS_TOKEN
    if not token:
        return settings.DEBUG
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def metrics_view(request):
    from django.http import HttpResponse

    from config.views import not_found

    if not metrics_allowed(request):
        return not_found(request)  # nothing here for whoever may not read it

    registry = _registry()
    output = generate_latest(registry)
    live = CollectorRegistry()
    live.register(LiveStateCollector())
    output += generate_latest(live)
    return HttpResponse(output, content_type=CONTENT_TYPE_LATEST)


def serve_own_metrics() -> None:
    """For relay and consumer processes on their own host: METRICS_PORT=9101 etc."""
    port = os.environ.get("METRICS_PORT")
    if port:
        start_http_server(int(port), registry=_registry())
