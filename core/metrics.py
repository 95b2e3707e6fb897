"""The Prometheus registry every app records into: each app declares its own
counters (orders/metrics.py, outbox/metrics.py) with the classes imported from
here, so that the multiprocess directory exists before the first one is made.

Counters live in each process. Under gunicorn, Celery, the relay and the
consumers started by `make run` they share PROMETHEUS_MULTIPROC_DIR, so
GET /metrics on any web worker shows every process of the host added up.
Processes on other hosts (containers) expose their own with METRICS_PORT.
Figures that are state, not events (outbox backlog, gate counters), are read
at scrape time by config/metrics.py, the one place that may look at every app.

Who may read /metrics: with METRICS_TOKEN set, only a request with
`Authorization: Bearer <token>` (Prometheus' `authorization` setting); without
it, anyone in development, and nobody (404) with DEBUG off. Relay and consumers
serve theirs on METRICS_PORT, which belongs on an internal address.
"""

import hmac
import os

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

REQUESTS = Counter("shop_http_requests_total", "HTTP requests", ["route", "method", "status"])
REQUEST_SECONDS = Histogram(
    "shop_http_request_duration_seconds",
    "HTTP request latency",
    ["route", "method"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)

__all__ = ["CONTENT_TYPE_LATEST", "Counter", "Gauge", "Histogram", "generate_latest"]


def registry() -> CollectorRegistry:
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


def serve_own_metrics() -> None:
    """For relay and consumer processes on their own host: METRICS_PORT=9101 etc."""
    from django.conf import settings

    if settings.METRICS_PORT:
        start_http_server(settings.METRICS_PORT, registry=registry())
