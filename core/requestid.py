"""Request ids: taken from X-Request-ID (or made up), returned in the response,
put on every log line and carried into outbox event headers, so one checkout
can be followed from HTTP to Kafka to each consumer."""

import contextvars
import logging
import re
import time
import uuid

from core.metrics import REQUEST_SECONDS, REQUESTS

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
_VALID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
access_logger = logging.getLogger("shop.access")


def current_request_id() -> str:
    return request_id_var.get()


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class RequestIdMiddleware:
    """First in the chain: sets the id, times the request, logs one line for it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        given = request.headers.get("X-Request-ID", "")
        request_id = given if _VALID.match(given) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id
            seconds = time.perf_counter() - started
            # Labels only from bounded sets: a made-up method or path never makes a new series.
            route = getattr(getattr(request, "resolver_match", None), "route", None) or "unmatched"
            method = request.method if request.method in _METHODS else "other"
            REQUESTS.labels(route, method, str(response.status_code)).inc()
            REQUEST_SECONDS.labels(route, method).observe(seconds)
            access_logger.info(
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "route": route,
                    "status": response.status_code,
                    "duration_ms": round(seconds * 1000, 2),
                },
            )
            return response
        finally:
            request_id_var.reset(token)
