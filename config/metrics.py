"""GET /metrics: every process's counters (core.metrics.registry) plus the
state read live from every app at scrape time (outbox backlog, gate counters),
kept for LIVE_CACHE_SECONDS so that frequent scrapes do not count the queue
each time. It lives here, at the top, because it looks at several apps."""

import threading
import time

from django.http import HttpResponse
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

import orders.metrics  # noqa: F401 - each app's counters are registered before the first scrape
import outbox.metrics  # noqa: F401
from core.metrics import CONTENT_TYPE_LATEST, generate_latest, metrics_allowed, registry
from core.views import not_found
from inventory import gate
from inventory.models import FlashSale
from orders.services.queue_admission import queue_depths, stale_queued
from outbox.services import backlog

LIVE_CACHE_SECONDS = 5.0


class LiveStateCollector:
    """State read at scrape time: outbox backlog and gate counters."""

    _lock = threading.Lock()
    _cached: tuple[float, list] | None = None

    def collect(self):
        with self._lock:
            cached = LiveStateCollector._cached
            if cached is None or time.monotonic() - cached[0] > LIVE_CACHE_SECONDS:
                cached = LiveStateCollector._cached = (time.monotonic(), list(self._read()))
        yield from cached[1]

    def _read(self):
        waiting = GaugeMetricFamily("shop_outbox_backlog", "Outbox events waiting for Kafka")
        oldest = GaugeMetricFamily("shop_outbox_oldest_age_seconds", "Age of the oldest waiting outbox event")
        gate_remaining = GaugeMetricFamily(
            "shop_gate_remaining", "Units the flash-sale gate still admits", labels=["sku"]
        )
        queued = GaugeMetricFamily(
            "shop_queue_depth", "Queue-mode checkouts admitted and not yet written", labels=["sku"]
        )
        stale = GaugeMetricFamily(
            "shop_queue_stale",
            "Queue-mode checkouts admitted over QUEUE_STALE_AFTER_SECONDS ago and not written (alert on > 0)",
            labels=["sku"],
        )
        try:
            outbox = backlog()
            waiting.add_metric([], outbox.waiting)
            oldest.add_metric([], outbox.oldest_age_seconds or 0.0)  # a gauge has no "none": nothing waits
            skus = list(FlashSale.objects.values_list("product_id", flat=True))
            for sku, counter in gate.counters(skus=skus).items():
                if counter["remaining"] is not None:
                    gate_remaining.add_metric([sku], counter["remaining"])
            for sku, depth in queue_depths().items():
                if sku in skus:  # bounded by the sales that exist
                    queued.add_metric([sku], depth)
            for sku, count in stale_queued().items():
                if sku in skus:
                    stale.add_metric([sku], count)
        except Exception:  # a scrape must answer even with PostgreSQL or Redis down
            pass
        yield waiting
        yield oldest
        yield gate_remaining
        yield queued
        yield stale


def metrics_view(request):
    if not metrics_allowed(request):
        return not_found(request)  # nothing here for whoever may not read it

    output = generate_latest(registry())
    live = CollectorRegistry()
    live.register(LiveStateCollector())
    output += generate_latest(live)
    return HttpResponse(output, content_type=CONTENT_TYPE_LATEST)
