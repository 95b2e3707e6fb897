"""The payment provider's API, one function per call: the interface a
provider's adapter implements (docs/architecture.md, "Payments"). Each call
goes to the adapter PAYMENT_PROVIDER names: `simulator` (the development
simulator, orders/provider_simulator.py) or `stripe` (orders/provider_stripe.py).

Every call carries an idempotency key: a call retried after a timeout, a 5xx or
a crash of ours is the same call to the provider, so money never moves twice.
An adapter raises ProviderUnavailable (the same call later) or ProviderRefused
(never as it is; AuthorizationLapsed for a capture whose hold has ended)."""

from importlib import import_module
from types import ModuleType

from django.conf import settings

from orders.provider_errors import AuthorizationLapsed, ProviderRefused, ProviderUnavailable

__all__ = [
    "AuthorizationLapsed",
    "ProviderRefused",
    "ProviderUnavailable",
    "capture",
    "create_session",
    "refund",
    "void",
]

ADAPTERS = {"simulator": "orders.provider_simulator", "stripe": "orders.provider_stripe"}


def _adapter() -> ModuleType:
    return import_module(ADAPTERS[settings.PAYMENT_PROVIDER])


def create_session(
    *, idempotency_key: str, order_id: int, amount: int, currency: str, expires_at: str, capture: str
) -> dict:
    """A hosted payment for the order: {"id", "pay_url", "expires_at"}. `capture`:
    "manual" (the shop captures later) or "automatic" (the provider captures as
    soon as it authorizes). The outcome comes through the signed webhook."""
    return _adapter().create_session(
        idempotency_key=idempotency_key,
        order_id=order_id,
        amount=amount,
        currency=currency,
        expires_at=expires_at,
        capture=capture,
    )


def capture(*, idempotency_key: str, payment_id: str, amount: int, currency: str) -> dict:
    """Take `amount` of the authorized money (all of it or less: the rest is released)."""
    return _adapter().capture(idempotency_key=idempotency_key, payment_id=payment_id, amount=amount, currency=currency)


def void(*, idempotency_key: str, payment_id: str) -> dict:
    """Release an authorization; no money moves."""
    return _adapter().void(idempotency_key=idempotency_key, payment_id=payment_id)


def refund(*, idempotency_key: str, refund_id: int, payment_id: str, amount: int, currency: str) -> dict:
    """Ask for a refund of `amount` of payment `payment_id`; the provider confirms
    later through the signed webhook (a refund event naming `refund_id`)."""
    return _adapter().refund(
        idempotency_key=idempotency_key, refund_id=refund_id, payment_id=payment_id, amount=amount, currency=currency
    )
