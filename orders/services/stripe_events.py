"""Stripe's webhook events, translated into the shop's payment and refund
outcomes through the same services as the simulator's webhook (docs/
architecture.md, "Stripe": the table). The payment the shop knows is the
PaymentIntent; its order is the `order_id` of its metadata (the adapter puts it
there). Redelivered, out of order, or for an unknown order: the services' rules.

    checkout.session.completed             authorized (paid: captured at once)
    payment_intent.amount_capturable_updated  authorized
    payment_intent.succeeded               captured (amount_received)
    payment_intent.payment_failed          failed
    payment_intent.canceled                lapsed, unless the shop voided it
    charge.refunded, refund.created,
    refund.updated, refund.failed          the refund (metadata.refund_id, of the attempt
                                           metadata.refund_key names) completed or failed
    anything else, or not this shop's      ignored (200)
"""

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime

from django.conf import settings

from orders.exceptions import InvalidWebhookBody, PaymentProviderUnavailable
from orders.models import Refund
from orders.provider_errors import ProviderRefused, ProviderUnavailable
from orders.services.authorizations import authorization_lapsed
from orders.services.payments import AUTHORIZED, CAPTURED, FAILED, SUCCEEDED, handle_payment_webhook
from orders.services.refunds import handle_refund_webhook

logger = logging.getLogger(__name__)

REFUND_STATUSES = {"succeeded": "succeeded", "failed": "failed", "canceled": "failed"}  # pending: wait
_ID = re.compile(r"[\x21-\x7e]{1,100}")
_CURRENCY = re.compile(r"[A-Za-z]{3}")


def apply_stripe_event(event: dict, *, raw_body: str, list_refunds: Callable[[str], list[dict]]) -> str:
    """Apply one verified event; what it did, for the answer and the log.
    `list_refunds(charge_id)`: a charge's refunds from Stripe's API, for a
    `charge.refunded` whose charge does not carry them (API versions since 2022).
    A field of the wrong type is a 400 (InvalidWebhookBody), never a 500; a
    payment or refund without this shop's name in its metadata is not ours
    (STRIPE_INSTANCE): ignored, never voided nor refunded."""
    kind, obj = event.get("type"), _object(event.get("data"), "data")
    created = _moment(event.get("created"))
    if kind == "checkout.session.completed":
        if not obj.get("payment_intent") or not _ours(obj):
            return "ignored"
        status = SUCCEEDED if obj.get("payment_status") == "paid" else AUTHORIZED
        return _payment(_id(obj["payment_intent"]), obj, obj.get("amount_total"), status, raw_body, created)
    if kind == "payment_intent.amount_capturable_updated":
        if not obj.get("amount_capturable") or not _ours(obj):
            return "ignored"
        return _payment(_id(obj.get("id")), obj, obj.get("amount"), AUTHORIZED, raw_body, created)
    if kind == "payment_intent.succeeded":
        return _payment(_id(obj.get("id")), obj, obj.get("amount_received"), CAPTURED, raw_body, created)
    if kind == "payment_intent.payment_failed":
        return _payment(_id(obj.get("id")), obj, obj.get("amount"), FAILED, raw_body, created)
    if kind == "payment_intent.canceled":
        if not _ours(obj):
            return "ignored"
        # The shop claims a void (VOIDING) before asking Stripe: a cancel it did not ask for is a hold that ended.
        reason = f"Stripe: {str(obj.get('cancellation_reason') or 'canceled')[:100]}"
        lapsed = authorization_lapsed(payment_id=_id(obj.get("id")), reason=reason)
        return "lapsed" if lapsed else "redelivered"
    if kind == "charge.refunded":
        listed = (obj.get("refunds") or {}).get("data") if isinstance(obj.get("refunds"), dict) else None
        outcomes = [_refund(_object(each, "refund")) for each in listed or _charge_refunds(obj, list_refunds)]
        return ",".join(outcomes) or "ignored"
    if kind in ("refund.created", "refund.updated", "refund.failed"):
        return _refund(obj)
    logger.debug("Stripe event %s (%s) ignored", event.get("id"), kind)
    return "ignored"


def _charge_refunds(charge: dict, list_refunds: Callable[[str], list[dict]]) -> list[dict]:
    try:
        return list_refunds(_id(charge.get("id")))
    except ProviderUnavailable as error:  # Stripe sends the event again: answered 503
        raise PaymentProviderUnavailable() from error
    except ProviderRefused:
        # The key may not read refunds (a restricted key): refund.* events carry them as well.
        logger.exception("the refunds of charge %s could not be listed", charge.get("id"))
        return []


def _payment(intent_id: str, obj: dict, amount, status: str, raw_body: str, created: datetime | None) -> str:
    if not _ours(obj):
        return "ignored"
    result = handle_payment_webhook(
        payment_id=intent_id,
        order_id=_number(_metadata(obj).get("order_id")),
        amount=_amount(amount),
        currency=_currency(obj.get("currency")),
        status=status,
        raw_body=raw_body,
        held_since=created,
    )
    return "redelivered" if result.redelivered else result.payment.outcome


def _refund(refund: dict) -> str:
    if not _ours(refund):
        return "ignored"
    status = REFUND_STATUSES.get(str(refund.get("status")))
    if status is None:
        return "pending"
    refund_id = _number(_metadata(refund).get("refund_id"))
    current = Refund.objects.filter(id=refund_id).values_list("id", "attempt").first()
    if current is None:
        logger.warning("Stripe refund %s names no refund of the shop's", refund.get("id"))
        return "unknown_refund"
    if _metadata(refund).get("refund_key") != f"refund-{current[0]}-{current[1]}":
        return "stale_attempt"  # an earlier attempt's word: the current one is told by its own
    confirmation = handle_refund_webhook(
        refund_id=refund_id,
        payment_id=_id(refund.get("payment_intent")),
        amount=_amount(refund.get("amount")),
        currency=_currency(refund.get("currency")),
        status=status,
    )
    return confirmation.outcome


def _ours(obj: dict) -> bool:
    return _metadata(obj).get("shop") == settings.STRIPE_INSTANCE


def _object(value, name: str) -> dict:
    if name == "data":
        value = value.get("object") if isinstance(value, dict) else None
    if not isinstance(value, dict):
        raise InvalidWebhookBody(f"The event's {name} is not an object.")
    return value


def _metadata(obj: dict) -> dict:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _id(value) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidWebhookBody("An id in the event is not one Stripe gives.")
    return value


def _amount(value) -> int:
    if type(value) is not int or not 0 <= value <= 10**15:
        raise InvalidWebhookBody("An amount in the event is not a whole number of minor units.")
    return value


def _currency(value) -> str:
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise InvalidWebhookBody("A currency in the event is not an ISO 4217 code.")
    return value.upper()


def _moment(value) -> datetime | None:
    """The event's creation: when Stripe saw the authorization, which may be
    days before a delivery that waited for the shop's endpoint."""
    return datetime.fromtimestamp(value, tz=UTC) if type(value) is int and 0 < value < 2**33 else None


def _number(text) -> int:
    """A metadata id as the shop's: digits only, else 0 (no such order or refund)."""
    text = str(text or "")
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else 0
