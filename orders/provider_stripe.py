"""The Stripe adapter (PAYMENT_PROVIDER=stripe): the four calls of
orders/provider.py through Stripe's official library.

- A session is a Checkout Session in payment mode, cards only, with the
  capture the shop asked for (`manual`: the money is held until the order
  ships), the order's amount and currency as one line, and the order id in the
  metadata of the session and of its PaymentIntent; `pay_url` is Stripe's
  hosted page. The payment the shop knows is the PaymentIntent (`pi_...`).
- Capture, void and refund are the PaymentIntent's capture (amount_to_capture:
  what the order costs now) and cancel, and a Refund with the shop's refund id
  in its metadata.
- Every call carries the shop's idempotency key; the library retries a call
  that failed before an answer, a 409 or a 5xx (STRIPE_MAX_NETWORK_RETRIES)
  under the same key, so Stripe acts once.

Errors: no answer, a 5xx, a 429 (rate limit) or a key Stripe refuses (the
operator's to fix: the calls wait) raise ProviderUnavailable; any other 4xx
raises ProviderRefused with Stripe's code (a capture of a hold that ended:
AuthorizationLapsed)."""

import json
import logging
import time
from datetime import UTC, datetime
from functools import cache

import stripe
from django.conf import settings

from orders.exceptions import InvalidSignature, InvalidWebhookBody
from orders.provider_errors import AuthorizationLapsed, ProviderRefused, ProviderUnavailable

logger = logging.getLogger(__name__)

# Stripe takes a Checkout Session's expiry 30 minutes to 24 hours ahead: a shorter
# one is lengthened (a payment after the shop's own deadline is voided: "Payments").
MIN_SESSION_SECONDS = 30 * 60 + 60
MAX_SESSION_SECONDS = 24 * 3600 - 60
TOLERANCE_SECONDS = 300  # a signed event older than this is refused (a replay), as Stripe's libraries default
UNAVAILABLE = (stripe.APIConnectionError, stripe.APIError, stripe.RateLimitError, stripe.AuthenticationError)


@cache
def _client(api_key: str, api_base: str, retries: int, timeout: int) -> stripe.StripeClient:
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": api_base},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def client() -> stripe.StripeClient:
    """One client per configuration (its HTTP session is reused across calls)."""
    return _client(
        settings.STRIPE_SECRET_KEY,
        settings.STRIPE_API_BASE,
        settings.STRIPE_MAX_NETWORK_RETRIES,
        settings.STRIPE_TIMEOUT_SECONDS,
    )


def _call(what: str, request, *, lapse_means_refused: bool = False):
    """`request()`, its errors turned into the shop's."""
    try:
        return request()
    except UNAVAILABLE as error:
        if isinstance(error, stripe.AuthenticationError):
            logger.error("Stripe refused the API key (STRIPE_SECRET_KEY): %s", error.user_message)
        raise ProviderUnavailable(f"Stripe {what}: {type(error).__name__} {error.http_status}") from error
    except stripe.StripeError as error:
        code = _code(error)
        message = f"Stripe refused {what}: {code or type(error).__name__}: {error.user_message or error}"
        if lapse_means_refused and _lapsed(error):
            raise AuthorizationLapsed(message, code=code) from error
        raise ProviderRefused(message, code=code) from error


def _options(idempotency_key: str) -> dict:
    """The shop's key under this shop's name: keys are per Stripe account, which a
    staging copy or another shop may share."""
    return {"idempotency_key": f"{settings.STRIPE_INSTANCE}:{idempotency_key}"}


def _metadata(**ids: int | str) -> dict:
    return {"shop": settings.STRIPE_INSTANCE, **{name: str(value) for name, value in ids.items()}}


def _intent_of(error: stripe.StripeError) -> dict:
    """The PaymentIntent Stripe sends with a refusal about its state, if any."""
    return ((error.json_body or {}).get("error") or {}).get("payment_intent") or {}


def _code(error: stripe.StripeError) -> str:
    return getattr(error, "code", None) or (error.error.code if error.error else "") or ""


def _lapsed(error: stripe.StripeError) -> bool:
    """A capture refused because the hold ended: Stripe cancels a PaymentIntent
    whose authorization expired (cancellation_reason "automatic"), and then
    refuses to capture it (payment_intent_unexpected_state), or says so in the
    code of the charge's error."""
    if _code(error) in ("charge_expired_for_capture", "capture_charge_authorization_expired"):
        return True
    return _code(error) == "payment_intent_unexpected_state" and _intent_of(error).get("status") == "canceled"


def create_session(
    *, idempotency_key: str, order_id: int, amount: int, currency: str, expires_at: str, capture: str
) -> dict:
    now = int(time.time())
    wanted = int(datetime.fromisoformat(expires_at).timestamp())
    expires = min(max(wanted, now + MIN_SESSION_SECONDS), now + MAX_SESSION_SECONDS)
    metadata = _metadata(order_id=order_id)
    params = {
        "mode": "payment",
        "payment_method_types": ["card"],
        "line_items": [
            {
                "quantity": 1,
                "price_data": {
                    "currency": currency.lower(),
                    "unit_amount": amount,
                    "product_data": {"name": f"Order {order_id}"},
                },
            }
        ],
        "payment_intent_data": {"capture_method": capture, "metadata": metadata},
        "metadata": metadata,
        "client_reference_id": str(order_id),
        "expires_at": expires,
        "success_url": settings.STRIPE_SUCCESS_URL,
        "cancel_url": settings.STRIPE_CANCEL_URL,
    }
    session = _call(
        "the session",
        lambda: client().v1.checkout.sessions.create(params=params, options=_options(idempotency_key)),
    )
    expires_at = datetime.fromtimestamp(session.expires_at, tz=UTC).isoformat()
    return {"id": session.id, "pay_url": session.url, "expires_at": expires_at}


def capture(*, idempotency_key: str, payment_id: str, amount: int, currency: str) -> dict:
    """A PaymentIntent found captured already (this capture's answer lost, and its
    key forgotten by Stripe after 24 hours) is the capture done, for what it took."""

    def request():
        try:
            return client().v1.payment_intents.capture(
                payment_id, params={"amount_to_capture": amount}, options=_options(idempotency_key)
            )
        except stripe.InvalidRequestError as error:
            if _intent_of(error).get("status") == "succeeded":
                return _intent_of(error)
            raise

    intent = _call("the capture", request, lapse_means_refused=True)
    return {"id": intent["id"], "status": "captured", "amount": intent["amount_received"]}


def void(*, idempotency_key: str, payment_id: str) -> dict:
    """A PaymentIntent cancelled already (by an earlier try, or by Stripe as its hold
    ended) holds nothing: the void is done."""
    try:
        intent = _call(
            "the void",
            lambda: client().v1.payment_intents.cancel(payment_id, options=_options(idempotency_key)),
            lapse_means_refused=True,
        )
    except AuthorizationLapsed:
        return {"id": payment_id, "status": "voided"}
    return {"id": intent.id, "status": "voided"}


def refund(*, idempotency_key: str, refund_id: int, payment_id: str, amount: int, currency: str) -> dict:
    """The refund's metadata names the shop's refund and the attempt (its key): an
    event of an earlier, failed attempt is not taken for the current one's."""
    metadata = _metadata(refund_id=refund_id, refund_key=idempotency_key)
    params = {"payment_intent": payment_id, "amount": amount, "metadata": metadata}
    made = _call("the refund", lambda: client().v1.refunds.create(params=params, options=_options(idempotency_key)))
    return {"id": made.id, "status": made.status}


def verified_stripe_event(*, body: bytes, header: str | None) -> dict:
    """The event Stripe signed, as plain JSON; InvalidSignature for a missing,
    stale (past TOLERANCE_SECONDS), malformed or wrong signature, or a body that
    is not the one signed; InvalidWebhookBody for a signed body that is no event."""
    try:
        stripe.WebhookSignature.verify_header(body, header, settings.STRIPE_WEBHOOK_SECRET, tolerance=TOLERANCE_SECONDS)
    # TypeError: hmac.compare_digest refuses a non-ASCII signature in the header.
    except (stripe.SignatureVerificationError, UnicodeDecodeError, TypeError, ValueError) as error:
        raise InvalidSignature("The Stripe-Signature header is missing, malformed, stale or wrong.") from error
    try:
        event = json.loads(body)
    except ValueError as error:
        raise InvalidWebhookBody() from error
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        raise InvalidWebhookBody()
    return event


def charge_refunds(charge_id: str) -> list[dict]:
    """The refunds of a charge, as Stripe lists them (a `charge.refunded` event's
    charge carries them no more)."""
    listed = _call("the refunds", lambda: client().v1.refunds.list(params={"charge": charge_id, "limit": 100}))
    return [refund.to_dict() for refund in listed.data]
