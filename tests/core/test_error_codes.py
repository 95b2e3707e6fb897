"""One registry of every error `code` the API answers (core/errors.py): every
error class names its code by the registry, and no wire value ever changes."""

import importlib
import pkgutil

from core import exceptions
from core.errors import ErrorCode
from core.exceptions import DomainError

PROJECT_PACKAGES = ("core", "shop", "cart", "inventory", "orders", "outbox", "config")
NOT_IMPORTED = {"config.wsgi", "config.gunicorn"}  # entry points, not libraries

# Classes that still spell their code as a string literal, in files this change
# could not touch. Their values are registered (checked below); delete an entry
# once its class names its ErrorCode member.
# Every value clients may already branch on (the API as of issue 16). A value may
# be added to the registry; none may be renamed or removed.
WIRE_VALUES = {
    "error",
    "invalid",
    "malformed_request",
    "not_authenticated",
    "authentication_failed",
    "permission_denied",
    "csrf_failed",
    "not_found",
    "method_not_allowed",
    "not_acceptable",
    "unsupported_media_type",
    "payload_too_large",
    "rate_limited",
    "database_unavailable",
    "cache_unavailable",
    "catalog_changing",
    "internal_error",
    "username_taken",
    "invalid_credentials",
    "cart_full",
    "cart_unavailable",
    "unknown_sku",
    "inactive_sku",
    "out_of_stock",
    "write_off_below_zero",
    "stock_limit_exceeded",
    "sold_out",
    "limit_reached",
    "gate_unavailable",
    "idempotency_key_missing",
    "idempotency_key_invalid",
    "idempotency_key_reused",
    "cart_empty",
    "sku_unavailable",
    "too_many_pending_orders",
    "order_not_cancellable",
    "order_not_refundable",
    "order_not_shippable",
    "invalid_signature",
}


def all_domain_errors() -> dict[str, type[DomainError]]:
    """Every DomainError subclass the project defines, whichever module holds it."""
    for package_name in PROJECT_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            if module.name not in NOT_IMPORTED and ".migrations" not in module.name:
                importlib.import_module(module.name)
    found, pending = {}, [DomainError]
    while pending:
        for cls in pending.pop().__subclasses__():
            pending.append(cls)
            if cls.__module__.split(".")[0] in PROJECT_PACKAGES:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_every_domain_error_answers_a_registered_code():
    errors = all_domain_errors()
    # The walk found the apps' errors, wherever they live, not just core's.
    assert {"core.hotcache.StaleCache", "inventory.gate.SoldOut", "orders.exceptions.CartEmpty"} <= set(errors)
    registered = {code.value for code in ErrorCode}
    unregistered = {name: cls.code for name, cls in errors.items() if cls.code not in registered}
    assert unregistered == {}


def test_every_domain_error_names_its_code_by_the_registry():
    errors = all_domain_errors()
    literals = {name for name, cls in errors.items() if not isinstance(cls.code, ErrorCode)}
    assert literals == set()
    assert isinstance(DomainError.code, ErrorCode)


def test_drf_and_django_refusals_map_to_registered_codes():
    assert all(isinstance(code, ErrorCode) for code in exceptions._DRF_CODES.values())


def test_no_wire_value_is_renamed_or_dropped():
    values = [code.value for code in ErrorCode]
    assert len(values) == len(set(values))
    assert WIRE_VALUES <= set(values), WIRE_VALUES - set(values)


def test_a_code_goes_on_the_wire_as_its_plain_string(api_client, db):
    body = api_client.get("/api/auth/me").json()["error"]
    assert body["code"] == "not_authenticated" and type(body["code"]) is str
    response = api_client.get("/api/no-such-thing")  # core.views.not_found, a plain Django view
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
