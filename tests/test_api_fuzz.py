"""Every operation of the OpenAPI schema, driven with generated input (schemathesis):
as a shopper with a token and anonymously, valid and invalid input alike. Each
answer must be no 5xx, a status the schema documents, and a body that matches it.

The seed is fixed (derandomize) and the examples per operation bounded, so a run
is repeatable and takes well under two minutes. A failure prints the request
that broke the contract: a bug to fix, not a case to exclude.
"""

import json

import pytest
import schemathesis
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from orders.signatures import sign
from tests.factories import UserFactory, api_token, product_with_stock

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

EXAMPLES = 100  # per operation, auth mode and generation mode
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
WEBHOOK = "POST /api/payments/webhook"


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():  # the schema view may look at the session
        return schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def in_test_transaction():
    """Requests run in the test's transaction, as with Django's test client: Django's
    WSGI handler would otherwise close the connection after each request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def shop(redis, in_test_transaction):
    """A catalog the generated SKUs may hit, and a shopper with a token and a full cart."""
    product_with_stock(sku="MUG", price=1200, available=5)
    product_with_stock(sku="A", price=100, available=0)
    shopper = UserFactory()
    redis.hset(f"cart:{shopper.id}", mapping={"MUG": 1, "A": 1})
    return {"Authorization": f"Token {api_token(shopper)}"}


def run(operation, headers: dict, mode: GenerationMode) -> int:
    calls = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    def call(case):
        nonlocal calls
        calls += 1
        extra, sent = {}, dict(headers)
        if operation.label == WEBHOOK and isinstance(case.body, dict | list) and calls % 2:
            # Half the webhook calls are signed, so generated bodies reach the service.
            body = json.dumps(case.body).encode()
            sent["Payment-Signature"] = sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)
            extra["data"] = body
        case.call_and_validate(headers=sent, checks=CHECKS, **extra)

    try:
        call()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        return 0  # nothing in this operation can be made invalid (no body, no parameter)
    return calls


@pytest.mark.parametrize("who", ["shopper", "anonymous"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_every_operation_holds_its_contract(schema, shop, settings, who, mode):
    settings.RATE_LIMITS = {"checkout": "100000/min", "cart_write": "100000/min", "auth": "100000/min"}
    headers = shop if who == "shopper" else {}
    calls = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        calls[operation.label] = run(operation, headers, mode)
    assert len(calls) == 17, sorted(calls)
    assert sum(calls.values()) >= (12 if mode is GenerationMode.POSITIVE else 6) * EXAMPLES // 2, calls
