"""Liveness and readiness probes: plain Django views, no auth, JSON bodies.

/readyz is open to anyone, so it is cheap to ask: its answer is kept for
PROBE_CACHE_SECONDS per process (a flood of probes reaches each service at most
once in that time), and it names what is down with a short reason only; the
details go to the log."""

import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django_redis import get_redis_connection

from core.kafka import ping_kafka, shop_topics, topic_warnings
from core.sharding import cluster, clustered

logger = logging.getLogger(__name__)


def healthz(request):
    return JsonResponse({"status": "ok"})


# A check raises when its service is down, and may return warnings when it is up.
def _check_postgres(timeout: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_redis(timeout: float) -> None:
    get_redis_connection("default").ping()
    if clustered():  # the carts' Redis Cluster: one node's view of the whole
        state = cluster().cluster_info().get("cluster_state")
        if state != "ok":
            raise ConnectionError(f"cluster_state {state}")


def _check_kafka(timeout: float) -> list[str]:
    return topic_warnings(ping_kafka(timeout=timeout), shop_topics())


CHECKS: dict[str, Callable[[float], list[str] | None]] = {
    "postgres": _check_postgres,
    "redis": _check_redis,
    "kafka": _check_kafka,
}


PROBE_CACHE_SECONDS = 2.0
_lock = threading.Lock()
_last: tuple[float, dict, int] | None = None  # (monotonic time, body, status)


def readyz(request):
    global _last
    with _lock:
        if _last is None or time.monotonic() - _last[0] > PROBE_CACHE_SECONDS:
            _last = (time.monotonic(), *_probe())
        body, status = _last[1], _last[2]
    return JsonResponse(body, status=status)


def forget_last_probe() -> None:
    global _last
    _last = None


def _probe() -> tuple[dict, int]:
    timeout = settings.HEALTH_CHECK_TIMEOUT_SECONDS
    services, warnings = {}, []
    for name, check in CHECKS.items():
        started = time.monotonic()
        try:
            found = check(timeout)
        except Exception as exc:  # any failure means "not ready"; the why goes to the log
            logger.warning("readyz: %s is down: %r", name, exc)
            services[name] = {"status": "down", "reason": type(exc).__name__}
        else:
            services[name] = {"status": "up", "ms": round((time.monotonic() - started) * 1000, 1)}
            warnings += found or []
    for warning in warnings:
        logger.warning("readyz: %s", warning)
    down = [name for name, result in services.items() if result["status"] != "up"]
    # Warnings (e.g. a topic with the wrong partition count) do not make the instance
    # unready: it serves as well as before, and a load balancer should not drop it.
    body = {"status": "unavailable" if down else "ready", "down": down, "warnings": warnings, "services": services}
    return body, 503 if down else 200
