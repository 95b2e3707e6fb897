"""A payment-provider simulator for development, served under /dev/payment-provider/
only while DEBUG is on (config/dev_provider_urls.py), so that `make run` shows a
payment's and a refund's whole loop without a real provider.

`make run` serves it from a process of its own (Procfile `provider`, port 8001), as
a real provider is: a shop's web thread waiting for it is not one it needs to answer.

Its JSON API (sessions, captures, voids, refunds) behaves as a real provider's
does where the shop's client depends on it: only the shop may call it
(`Authorization: Bearer <PAYMENT_PROVIDER_KEY>`, else 401 and nothing done), every
call carries an Idempotency-Key and a call repeated with the same key gets the
first answer without acting again (the answer is kept in Redis a day);
DEV_PROVIDER_FAILURE plays an outage ("fail") or a slow provider ("slow"). A
session's pay page lets a person pay or decline: the signed webhooks go to the
shop before the page answers, so the shop has applied them by the time the
browser shows the outcome."""

import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import wraps

import urllib3
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST
from django_redis import get_redis_connection
from rest_framework import serializers

from core.fields import StrictIntegerField
from core.money import format_money
from orders.signatures import sign

logger = logging.getLogger(__name__)
KEPT_SECONDS = 24 * 3600

# What a view does once, only for the first call with its key (None: nothing).
Act = Callable[[], None] | None


class VoidInput(serializers.Serializer):
    payment_id = serializers.RegexField(r"^[\x21-\x7e]{1,100}$")


class CaptureInput(VoidInput):
    amount = StrictIntegerField(min_value=1, max_value=10**15)
    currency = serializers.RegexField(r"^[A-Z]{3}$")


class RefundInput(CaptureInput):
    refund_id = StrictIntegerField(min_value=1)


class SessionInput(serializers.Serializer):
    order_id = StrictIntegerField(min_value=1)
    amount = StrictIntegerField(min_value=1, max_value=10**15)
    currency = serializers.RegexField(r"^[A-Z]{3}$")
    capture = serializers.ChoiceField(["manual", "automatic"])
    # Kept as sent: the answer gives it back unchanged.
    expires_at = serializers.CharField()

    def validate_expires_at(self, value: str) -> str:
        if _moment(value) is None:
            raise serializers.ValidationError("An ISO-8601 date and time with a UTC offset is required.")
        return value


def _moment(text: str) -> datetime | None:
    """An ISO-8601 date and time with its offset; None for anything else (a time
    without an offset is ambiguous, so a provider would not take it)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else None


def provider_call(input_class: type[serializers.Serializer]):
    """What every JSON API call shares: the shop's API key, the drills, the
    Idempotency-Key, the body checked by `input_class`, and a call repeated with the
    same key answered as the first without acting again. The decorated view gets the
    checked fields and returns its answer and what to do, which is done only if that
    answer is the first one stored for the key (SET NX: of two calls at once, one acts)."""

    def decorate(view: Callable[[HttpRequest, dict], tuple[dict, Act]]):
        @csrf_exempt
        @require_POST
        @wraps(view)
        def call(request: HttpRequest) -> HttpResponse:
            if not _from_the_shop(request):
                return JsonResponse({"error": "Authorization: Bearer <the shop's API key> is required"}, status=401)
            if settings.DEV_PROVIDER_FAILURE == "fail":
                return JsonResponse({"error": "simulated outage"}, status=503)
            if settings.DEV_PROVIDER_FAILURE == "slow":
                time.sleep(settings.DEV_PROVIDER_DELAY_SECONDS)
            key = request.headers.get("Idempotency-Key", "")
            if not key:
                return JsonResponse({"error": "Idempotency-Key is required"}, status=400)
            try:
                checked = input_class(data=json.loads(request.body))
            except ValueError:
                return JsonResponse({"error": "the body must be JSON"}, status=400)
            if not checked.is_valid():
                problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in checked.errors.items())
                return JsonResponse({"error": problems}, status=400)
            answer, act = view(request, checked.validated_data)
            redis = get_redis_connection("default")
            if redis.set(f"dev-provider:{key}", json.dumps(answer), nx=True, ex=KEPT_SECONDS):
                if act:
                    act()
            return HttpResponse(redis.get(f"dev-provider:{key}"), content_type="application/json")

        return call

    return decorate


def _from_the_shop(request: HttpRequest) -> bool:
    key = settings.PAYMENT_PROVIDER_KEY
    sent = request.headers.get("Authorization", "")
    # An empty key opens nothing. Bytes: compare_digest refuses a str that is not ASCII.
    return bool(key) and hmac.compare_digest(sent.encode(), f"Bearer {key}".encode())


@provider_call(SessionInput)
def sessions(request, fields):
    session_id = f"ps_sim_{secrets.token_hex(8)}"
    pay_url = request.build_absolute_uri(reverse("dev-pay", args=[session_id]))
    session = json.dumps({**fields, "status": "open"})

    def store() -> None:
        get_redis_connection("default").set(_session_key(session_id), session, ex=KEPT_SECONDS)

    return {"id": session_id, "pay_url": pay_url, "expires_at": fields["expires_at"]}, store


@provider_call(CaptureInput)
def captures(request, fields):
    return {"id": fields["payment_id"], "status": "captured"}, None


@provider_call(VoidInput)
def voids(request, fields):
    return {"id": fields["payment_id"], "status": "voided"}, None


@provider_call(RefundInput)
def refunds(request, fields):
    # Confirmed by the webhook later, as a real provider does: the shop's
    # refund stays submitted until then.
    confirm = threading.Thread(target=_confirm, args=(fields,), daemon=True)
    return {"id": f"re_sim_{fields['refund_id']}", "status": "pending"}, confirm.start


def _confirm(fields: dict) -> None:
    time.sleep(0.5)  # after the shop has the answer to its call
    _send_webhook({"type": "refund", **fields, "status": "succeeded"})


def _send_webhook(body: dict) -> int | None:
    """POST one signed event to the shop's webhook: the shop's HTTP status, or None
    when it could not be delivered (logged; the caller says so)."""
    data = json.dumps(body).encode()
    headers = {
        "Content-Type": "application/json",
        "Payment-Signature": sign(body=data, secret=settings.PAYMENT_WEBHOOK_SECRET),
    }
    name = f"{body['type']} {body.get('refund_id') or body['payment_id']} {body['status']}"
    try:
        response = urllib3.request("POST", settings.DEV_PROVIDER_WEBHOOK_URL, body=data, headers=headers, timeout=10)
    except urllib3.exceptions.HTTPError as error:
        logger.warning("dev provider: could not deliver %s: %r", name, error)
        return None
    logger.info("dev provider: %s delivered -> %s", name, response.status)
    return response.status


# --- the hosted pay page -------------------------------------------------------------


@csrf_exempt
@require_http_methods(["GET", "POST"])
def pay(request, session_id: str):
    """The page a shopper is sent to: Pay or Decline while the session is open,
    its outcome once decided (a second click sends nothing). Of the form only the
    action is read: the amount, order and currency paid are the session's, as the
    shop asked for them."""
    session = _session(session_id)
    if session and request.method == "POST" and not _expired(session):
        outcome = {"pay": "paid", "decline": "declined"}.get(request.POST.get("action"))
        if outcome is None:
            return HttpResponseBadRequest("action must be pay or decline", content_type="text/plain")
        session = _decide(session_id, outcome)
        if session and session["status"] == "open":
            events = _payment_events(session_id, session, outcome)
            context = {
                **_page({**session, "status": outcome}),
                "url": settings.DEV_PROVIDER_WEBHOOK_URL,
                "deliveries": [(event["status"], _send_webhook(event)) for event in events],
            }
            return render(request, "dev_provider/result.html", context)
    if session is None or _expired(session):
        context = {"session_id": session_id, "expired": session is not None}
        return render(request, "dev_provider/missing.html", context, status=404)
    return render(request, "dev_provider/pay.html", _page(session))


def _session_key(session_id: str) -> str:
    return f"dev-provider:session:{session_id}"


def _session(session_id: str) -> dict | None:
    stored = get_redis_connection("default").get(_session_key(session_id))
    return None if stored is None else json.loads(stored)


def _expired(session: dict) -> bool:
    """Past its expiry and still open (a decided session shows its outcome for as long as it is kept)."""
    return session["status"] == "open" and _moment(session["expires_at"]) <= timezone.now()


def _decide(session_id: str, outcome: str) -> dict | None:
    """Mark an open session paid or declined. The session as it was: open when
    this call decided it, decided already when another did (WATCH: of two clicks
    at once, a double submit, one decides), None when it is gone."""
    key = _session_key(session_id)

    def mark(pipe) -> dict | None:
        session = json.loads(pipe.get(key) or "null")
        if session and session["status"] == "open":
            pipe.multi()
            pipe.set(key, json.dumps({**session, "status": outcome}), keepttl=True)
        return session

    return get_redis_connection("default").transaction(mark, key, value_from_callable=True)


def _payment_events(session_id: str, session: dict, outcome: str) -> list[dict]:
    """The webhooks a decision sends: a decline fails a payment of its own; a payment
    is authorized, and captured at once when the session asked for it."""
    if outcome == "declined":
        payment_id, statuses = f"pay_sim_{session_id}-declined", ["failed"]
    elif session["capture"] == "automatic":
        payment_id, statuses = f"pay_sim_{session_id}", ["authorized", "captured"]
    else:
        payment_id, statuses = f"pay_sim_{session_id}", ["authorized"]
    event = {
        "type": "payment",
        "payment_id": payment_id,
        "order_id": session["order_id"],
        "amount": session["amount"],
        "currency": session["currency"],
    }
    return [{**event, "status": status} for status in statuses]


def _page(session: dict) -> dict:
    return {"session": session, "amount": format_money(session["amount"], session["currency"])}
