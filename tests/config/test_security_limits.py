"""Limits a client cannot sidestep with headers, and probes that cannot be abused."""

import pytest
from django.test import Client
from prometheus_client import REGISTRY

from config import health
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def login(client: Client, **headers):
    return client.post(
        "/api/auth/token", {"username": "nobody", "password": "x"}, content_type="application/json", **headers
    )


@pytest.fixture
def auth_limit(settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "auth": "5/min"}


def test_a_made_up_x_forwarded_for_does_not_escape_the_login_limit(client, auth_limit):
    statuses = [login(client, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code for n in range(25)]
    assert statuses[:5] == [401] * 5
    assert set(statuses[5:]) == {429}


def test_behind_one_trusted_proxy_the_address_it_saw_is_the_client(client, auth_limit, settings):
    settings.TRUSTED_PROXIES = 1
    # The client's own words come first; the proxy appends the address it saw.
    same_client = [login(client, HTTP_X_FORWARDED_FOR=f"10.6.6.{n}, 198.51.100.7") for n in range(6)]
    assert [r.status_code for r in same_client] == [401] * 5 + [429]
    assert login(client, HTTP_X_FORWARDED_FOR="198.51.100.8").status_code == 401  # another client
    assert login(client, HTTP_X_FORWARDED_FOR="not-an-address").status_code == 401  # the peer's window
    assert [login(client).status_code for _ in range(5)] == [401] * 4 + [429]  # the peer's, too


def test_the_admin_login_shares_the_api_login_limit(client, auth_limit):
    UserFactory(username="staff", is_staff=True)
    for _ in range(3):
        login(client)
    attempts = [
        client.post("/admin/login/", {"username": "staff", "password": "wrong"}).status_code for _ in range(3)
    ]
    assert attempts == [200, 200, 429]  # 200: the form again, with its error
    refused = client.post("/admin/login/", {"username": "staff", "password": "wrong"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert client.get("/admin/login/").status_code == 200  # looking at the form is not an attempt


def test_made_up_http_methods_share_one_metric_series(client):
    labels = {"route": "healthz", "method": "other", "status": "200"}
    before = REGISTRY.get_sample_value("shop_http_requests_total", labels) or 0
    for method in ("FOO", "BAR", "X" * 100):
        assert client.generic(method, "/healthz").status_code == 200
    assert REGISTRY.get_sample_value("shop_http_requests_total", labels) == before + 3
    methods = {
        sample.labels.get("method")
        for metric in REGISTRY.collect()
        if metric.name.startswith("shop_http_request")
        for sample in metric.samples
    }
    assert not methods & {"FOO", "BAR", "X" * 100}


def test_readyz_names_what_is_down_without_its_error_text(client, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"
    body = client.get("/readyz").json()
    assert body["down"] == ["kafka"]
    assert body["services"]["kafka"] == {"status": "down", "reason": "KafkaException"}


def test_readyz_answers_a_flood_from_one_probe(client, monkeypatch):
    calls = []
    monkeypatch.setattr(health, "CHECKS", {"postgres": lambda timeout: calls.append(timeout)})
    for _ in range(50):
        assert client.get("/readyz").status_code == 200
    assert len(calls) == 1
    health.forget_last_probe()
    client.get("/readyz")
    assert len(calls) == 2


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
