"""Errors that know their HTTP meaning, and the one handler that renders them.

Every API error leaves as ``{"error": {"code", "message", "details"}}``.
"""

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError
from django.http import Http404
from redis.exceptions import RedisError
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ErrorCode

logger = logging.getLogger("shop.api")


class DomainError(Exception):
    """A business rule said no. Subclasses set ``code`` (a member of
    core.errors.ErrorCode, the registry of every code) and ``status``."""

    code: ErrorCode = ErrorCode.ERROR
    status = 400
    message = "The request could not be served."

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or self.message
        self.details = details
        super().__init__(self.message)


class NotFound(DomainError):
    code = ErrorCode.NOT_FOUND
    status = 404
    message = "Not found."


class RateLimited(DomainError):
    code = ErrorCode.RATE_LIMITED
    status = 429
    message = "Too many requests; retry after the number of seconds in Retry-After."

    def __init__(self, *, retry_after: int) -> None:
        super().__init__(retry_after=retry_after)
        self.headers = {"Retry-After": str(retry_after)}


class PayloadTooLarge(DomainError):
    code = ErrorCode.PAYLOAD_TOO_LARGE
    status = 413
    message = "The request body is larger than the server accepts."


class CacheUnavailable(DomainError):
    code = ErrorCode.CACHE_UNAVAILABLE
    status = 503
    message = "The cache is unavailable; retry shortly."


class DatabaseUnavailable(DomainError):
    code = ErrorCode.DATABASE_UNAVAILABLE
    status = 503
    message = "The database is unavailable; retry shortly."


def infrastructure_error(exc: Exception) -> DomainError | None:
    """The DomainError a client sees for a request cut short by a service or a limit, if any."""
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    if isinstance(exc, OperationalError):  # the database is down or out of connections
        logger.error("database unavailable: %s", exc)
        return DatabaseUnavailable()
    if isinstance(exc, RedisError):  # e.g. the cache generation could not be read or moved
        logger.error("redis unavailable: %r", exc)
        return CacheUnavailable()
    return None


_DRF_CODES: dict[type[drf.APIException], ErrorCode] = {
    drf.NotAuthenticated: ErrorCode.NOT_AUTHENTICATED,
    drf.AuthenticationFailed: ErrorCode.AUTHENTICATION_FAILED,
    drf.PermissionDenied: ErrorCode.PERMISSION_DENIED,
    drf.NotFound: ErrorCode.NOT_FOUND,
    drf.MethodNotAllowed: ErrorCode.METHOD_NOT_ALLOWED,
    drf.NotAcceptable: ErrorCode.NOT_ACCEPTABLE,
    drf.UnsupportedMediaType: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    drf.Throttled: ErrorCode.RATE_LIMITED,
    drf.ParseError: ErrorCode.MALFORMED_REQUEST,
    drf.ValidationError: ErrorCode.INVALID,
}


def error_body(code: ErrorCode, message: str, details: Any = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def api_exception_handler(exc: Exception, context: dict) -> Response:
    exc = infrastructure_error(exc) or exc
    if isinstance(exc, DomainError):
        return Response(
            error_body(exc.code, exc.message, exc.details), status=exc.status, headers=getattr(exc, "headers", None)
        )

    if isinstance(exc, DjangoValidationError):
        details = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return Response(error_body(ErrorCode.INVALID, "The request is invalid.", details), status=400)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        view = context.get("view")
        logger.exception("unhandled error in %s", type(view).__name__ if view else "API", exc_info=exc)
        return Response(
            error_body(ErrorCode.INTERNAL_ERROR, "Something went wrong on our side; it has been logged."),
            status=500,
        )

    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), ErrorCode.ERROR)
    if isinstance(exc, drf.ValidationError):
        message, details = "The request is invalid.", exc.detail
        if not isinstance(details, dict):
            details = {"non_field_errors": details}
    else:
        message, details = str(exc.detail), {}
    response.data = error_body(code, message, details)
    return response
