"""core/exceptions.py and core/views.py: every error answers the JSON envelope, and a
500 leaks nothing of what went wrong (tests/core/urls_boom.py raises on purpose)."""

import pytest
from django.test import Client


def test_error_envelope_for_unauthenticated_request(api_client, db):
    response = api_client.get("/api/auth/me")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert set(response.json()["error"]) == {"code", "message", "details"}


def test_error_envelope_for_malformed_json(api_client, db):
    response = api_client.post("/api/auth/token", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_request"


def test_unknown_url_is_json_404(api_client, db):
    response = api_client.get("/api/does-not-exist")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.urls("tests.core.urls_boom")
def test_forced_500_in_api_view_leaks_nothing(api_client, db, caplog):
    response = api_client.get("/boom")
    assert response.status_code == 500
    body = response.json()
    assert body["error"]["code"] == "internal_error"
    assert "hunter2" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert "secret internals" in caplog.text  # but the server log has it


@pytest.mark.urls("tests.core.urls_boom")
def test_forced_500_outside_drf_is_json_too(db, settings):
    settings.DEBUG = False
    client = Client(raise_request_exception=False)
    response = client.get("/plain-boom")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "hunter2" not in response.content.decode()
