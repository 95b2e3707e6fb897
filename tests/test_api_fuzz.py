"""Every operation of the OpenAPI schema, driven with generated input (schemathesis):
as a shopper with a token and anonymously, valid and invalid input alike. Each
answer must be no 5xx, a status the schema documents, and a body that matches it.

The seed is fixed (derandomize) and the examples per operation bounded, so a run
is repeatable and takes well under two minutes. A failure prints the request
that broke the contract: a bug to fix, not a case to exclude.
"""

import json
import os
import re

import pytest
import schemathesis
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
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

# Per operation, auth mode and generation mode. 20 keeps the four runs near a minute
# in make test; FUZZ_EXAMPLES=200 for a deeper run by hand.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
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
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in sorted(operations, key=lambda operation: operation.label in TOKEN_ENDING):
        calls[operation.label] = run(operation, headers, mode)  # the token lives until the operations that end it
    assert len(calls) == 33, sorted(calls)
    assert sum(calls.values()) >= (12 if mode is GenerationMode.POSITIVE else 6) * EXAMPLES // 2, calls


def poisoned(value, bad: str):
    """`value` with `bad` appended to every string value in it (the keys kept, so
    that the values reach the fields that read them)."""
    if isinstance(value, str):
        return value + bad
    if isinstance(value, dict):
        return {k: poisoned(v, bad) for k, v in value.items()}
    if isinstance(value, list):
        return [poisoned(v, bad) for v in value]
    return value


@pytest.mark.parametrize("bad", ["\ud800", "\x00"], ids=["lone-surrogate", "nul"])
def test_strings_that_are_not_text_are_refused_without_an_error(schema, shop, settings, bad):
    """Generated requests with a lone surrogate (bodies: JSON can spell it, a URL
    cannot) or a NUL in every string they carry: a 4xx or an answer, never a 5xx."""
    settings.RATE_LIMITS = {"checkout": "100000/min", "cart_write": "100000/min", "auth": "100000/min"}
    calls = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.label in TOKEN_ENDING:
            continue  # the shopper's token must live through the other operations

        @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
        @hypothesis_settings(
            max_examples=10,
            derandomize=True,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def call(case):
            nonlocal calls
            calls += 1
            extra, headers = {}, dict(shop)
            if isinstance(case.body, dict | list | str):
                # Encoded here, as JSON escapes what UTF-8 cannot hold (schemathesis would encode it as UTF-8).
                extra["data"] = json.dumps(poisoned(case.body, bad)).encode()
                headers["Content-Type"] = "application/json"
                case.body = NOT_SET
            if case.query and bad == "\x00":
                case.query = poisoned(case.query, bad)
            response = case.call(headers=headers, **extra)
            assert response.status_code < 500, (case.operation.label, extra.get("data"), response.content[:300])

        call()
    assert calls >= 10 * 12


TOKEN_ENDING = {"POST /api/auth/logout", "POST /api/auth/password", "DELETE /api/auth/me"}


def test_options_and_head_on_every_path_answer_without_an_error(schema, shop):
    from django.test import Client

    paths = {result.ok().path for result in schema.get_all_operations()}
    for who in ({}, {"HTTP_AUTHORIZATION": shop["Authorization"]}):
        client = Client(**who)
        for template in paths:
            path = re.sub(r"\{[^}]*\}", "1", template.replace("{sku}", "MUG"))
            for method in ("options", "head"):
                response = getattr(client, method)(path)
                assert response.status_code < 500, (method, path, response.status_code)
