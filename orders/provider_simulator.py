"""The development simulator's adapter (PAYMENT_PROVIDER=simulator): the four
calls of orders/provider.py in the simulator's HTTP protocol
(config/dev_provider.py, at PAYMENT_PROVIDER_URL).

Every call carries the shop's API key (PAYMENT_PROVIDER_KEY: without it the
simulator acts on nothing) and an idempotency key: a call retried after a
timeout, a 5xx or a crash of ours is the same call to the provider, so money
never moves twice. urllib3 retries what failed before an answer or with a 5xx
(3 times, 0.2 s doubling); what is still failing raises ProviderUnavailable, a
ConnectionError, which the consumers treat as an outage (retried with backoff,
never dead-lettered)."""

import json

import urllib3
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from orders.provider_errors import ProviderRefused, ProviderUnavailable

_http = urllib3.PoolManager(
    timeout=urllib3.Timeout(connect=2.0, read=5.0),
    retries=urllib3.Retry(
        total=3, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504), allowed_methods=None, raise_on_status=False
    ),
)


def _post(path: str, body: dict, *, idempotency_key: str) -> dict:
    if not settings.PAYMENT_PROVIDER_URL:
        raise ImproperlyConfigured("PAYMENT_PROVIDER_URL is not set")
    try:
        response = _http.request(
            "POST",
            f"{settings.PAYMENT_PROVIDER_URL.rstrip('/')}/{path}",
            body=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": idempotency_key,
                "Authorization": f"Bearer {settings.PAYMENT_PROVIDER_KEY}",
            },
        )
    except urllib3.exceptions.HTTPError as error:
        raise ProviderUnavailable(f"payment provider: {error}") from error
    if response.status >= 500:
        raise ProviderUnavailable(f"payment provider answered {response.status}")
    if response.status >= 400:
        detail = response.data[:150].decode(errors="replace")
        raise ProviderRefused(f"payment provider answered {response.status}: {detail}")
    return json.loads(response.data or b"{}")


def refund(*, idempotency_key: str, refund_id: int, payment_id: str, amount: int, currency: str) -> dict:
    """Ask for a refund of `amount` of payment `payment_id`; the provider confirms
    later through the signed webhook (a refund event naming `refund_id`)."""
    body = {"refund_id": refund_id, "payment_id": payment_id, "amount": amount, "currency": currency}
    return _post("refunds", body, idempotency_key=idempotency_key)


def create_session(
    *, idempotency_key: str, order_id: int, amount: int, currency: str, expires_at: str, capture: str
) -> dict:
    """A hosted payment for the order: {"id", "pay_url", "expires_at"}. `capture`:
    "manual" (the shop captures later) or "automatic" (the provider captures as
    soon as it authorizes). The outcome comes through the signed webhook."""
    body = {"order_id": order_id, "amount": amount, "currency": currency, "capture": capture, "expires_at": expires_at}
    return _post("sessions", body, idempotency_key=idempotency_key)


def capture(*, idempotency_key: str, payment_id: str, amount: int, currency: str) -> dict:
    """Take the authorized money; answered at once ({"status": "captured"})."""
    body = {"payment_id": payment_id, "amount": amount, "currency": currency}
    return _post("captures", body, idempotency_key=idempotency_key)


def void(*, idempotency_key: str, payment_id: str) -> dict:
    """Release an authorization; no money moves ({"status": "voided"})."""
    return _post("voids", {"payment_id": payment_id}, idempotency_key=idempotency_key)
