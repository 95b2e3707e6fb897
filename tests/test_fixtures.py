"""The suite's own fixtures (tests/conftest.py), where they could hide a behaviour."""

from django.test import Client


def test_clients_share_one_middleware_chain_until_a_setting_changes(settings):
    first, second = Client(), Client()
    assert first.get("/healthz")["X-Content-Type-Options"] == "nosniff"
    second.get("/healthz")
    assert second.handler._middleware_chain is first.handler._middleware_chain  # loaded once

    settings.SECURE_CONTENT_TYPE_NOSNIFF = False  # read by SecurityMiddleware when it is made
    third = Client()
    assert "X-Content-Type-Options" not in third.get("/healthz")
    assert third.handler._middleware_chain is not first.handler._middleware_chain
