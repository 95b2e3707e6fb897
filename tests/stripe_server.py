"""A local stand-in for the part of Stripe's API the shop's adapter uses
(orders/provider_stripe.py), faithful on the wire: form-encoded nested
parameters, Stripe's object shapes and error bodies, idempotent POSTs. The
official library talks to it as to Stripe:

    server = StripeServer(webhook_url="http://127.0.0.1:8000/api/payments/stripe/webhook")
    client = stripe.StripeClient("sk_test_shop", base_addresses={"api": server.url}, max_network_retries=2)

Tests act as the shopper and the card network with `pay()`, `decline()`,
`lapse()`, `refund_fails()` and `refund_succeeds()`; each returns the events it
queued (all are in `server.events`), and `deliver()` posts the undelivered ones,
signed, to the webhook. `fail_next()` and `delay_next()` inject faults.

Run alone for manual tries (a pay page at /pay/<session id>, and
POST /_test/payment_intents/<id>/lapse):

    python tests/stripe_server.py --webhook-url http://127.0.0.1:8000/api/payments/stripe/webhook
"""

import argparse
import base64
import binascii
import copy
import hashlib
import hmac
import html
import json
import re
import secrets
import string
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

import stripe

SESSION_MIN_SECONDS = 30 * 60  # Stripe takes a Checkout Session's expires_at 30 minutes to 24 hours ahead
SESSION_MAX_SECONDS = 24 * 60 * 60
SESSION_PARAMS = {
    *("mode", "payment_method_types", "line_items", "payment_intent_data", "metadata", "client_reference_id"),
    *("customer_email", "expires_at", "success_url", "cancel_url"),
}
CAPTURE_METHODS = ("automatic", "automatic_async", "manual")
CANCELABLE = ("requires_payment_method", "requires_capture", "requires_confirmation", "requires_action", "processing")
CANCELLATION_REASONS = ("abandoned", "duplicate", "fraudulent", "requested_by_customer")
REFUND_REASONS = ("duplicate", "fraudulent", "requested_by_customer")
DECLINE_MESSAGES = {"insufficient_funds": "Your card has insufficient funds."}
SYMBOLS = {"usd": "$", "eur": "€", "gbp": "£"}
API_ERROR = (
    "Sorry, something went wrong. We've already been notified of the problem, but if you need any help, "
    "you can reach us at support.stripe.com/contact."
)
# Stripe answers a 429 as an invalid_request_error with code rate_limit (there is no rate_limit_error type on the wire).
RATE_LIMITED = (
    "Testmode request rate limit exceeded, the rate limits in testmode are lower than livemode. "
    "You can learn more about rate limits here https://stripe.com/docs/rate-limits."
)


def _id(prefix: str, length: int = 24) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(length))


def _now() -> int:
    return int(time.time())


class StripeRefusal(Exception):
    """An answer in Stripe's error shape. `saved`: whether an idempotency key keeps
    it; Stripe keeps nothing for a request refused before its endpoint ran (a
    missing or unknown parameter)."""

    def __init__(self, status: int, kind: str, message: str, *, code=None, param=None, saved=True, **extra):
        super().__init__(message)
        error = {"type": kind, "message": message}
        if code:
            error |= {"code": code, "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"}
        if param:
            error["param"] = param
        self.status, self.saved, self.body = status, saved, {"error": error | extra}


def _invalid(message: str, **details) -> StripeRefusal:
    return StripeRefusal(400, "invalid_request_error", message, **details)


def _missing(param: str) -> StripeRefusal:
    return _invalid(f"Missing required param: {param}.", code="parameter_missing", param=param, saved=False)


def _no_such(kind: str, object_id: str, param: str) -> StripeRefusal:
    return StripeRefusal(
        404, "invalid_request_error", f"No such {kind}: '{object_id}'", code="resource_missing", param=param
    )


def _unexpected_state(intent: dict, message: str) -> StripeRefusal:
    return _invalid(message, code="payment_intent_unexpected_state", payment_intent=copy.deepcopy(intent))


def _fault(status: int) -> StripeRefusal:
    if status == 429:
        return StripeRefusal(429, "invalid_request_error", RATE_LIMITED, code="rate_limit")
    if status == 402:
        return StripeRefusal(
            402, "card_error", "Your card was declined.", code="card_declined", decline_code="generic_decline"
        )
    if status >= 500:
        return StripeRefusal(status, "api_error", API_ERROR)
    return StripeRefusal(status, "invalid_request_error", f"An injected error ({status}).")


def _int(params: dict, name: str, default=None, *, minimum: int = 0) -> int | None:
    if name not in params:
        return default
    value = params[name]
    if not (isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit()):
        raise _invalid(f"Invalid integer: {value}", code="parameter_invalid_integer", param=name, saved=False)
    if int(value) < minimum:
        raise _invalid(f"This value must be greater than or equal to {minimum}.", param=name, saved=False)
    return int(value)


def _allow(params: dict, names: set[str], prefix: str = "") -> None:
    for name in params:
        if name not in names:
            unknown = f"{prefix}[{name}]" if prefix else name
            raise _invalid(
                f"Received unknown parameter: {unknown}", code="parameter_unknown", param=unknown, saved=False
            )


def _metadata(value) -> dict:
    return dict(value) if isinstance(value, dict) else {}  # `metadata=` (empty) clears it


def _key_of(header: str | None) -> str:
    """The API key of an Authorization header: Bearer, or Basic with the key as the user (curl -u sk_test_...:)."""
    kind, _, value = (header or "").partition(" ")
    if kind == "Basic":
        try:
            return base64.b64decode(value + "==").decode(errors="replace").partition(":")[0]
        except binascii.Error:
            return ""
    return value.strip() if kind == "Bearer" else ""


def _money(amount: int, currency: str) -> str:
    return f"{SYMBOLS.get(currency, currency.upper() + ' ')}{amount / 100:.2f}"


def parse_form(text: str) -> dict:
    """Stripe's form encoding as nested values: `a[b][c]=v` → {"a": {"b": {"c": "v"}}},
    `a[0][b]=v` → {"a": [{"b": "v"}]}, `a[]=v` appends."""
    params: dict = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        head = key.split("[", 1)[0]
        parts = [head, *re.findall(r"\[([^\]]*)\]", key[len(head) :])]
        node = params
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1] or str(len(node))] = value
    return _listed(params)


def _listed(value):
    if not isinstance(value, dict):
        return value
    items = {key: _listed(item) for key, item in value.items()}
    if items and all(key.isdigit() for key in items):
        return [items[key] for key in sorted(items, key=int)]
    return items


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict
    idempotency_key: str | None


@dataclass(frozen=True)
class _Saved:
    method: str
    path: str
    params: dict
    status: int
    body: bytes
    request_id: str


ROUTES = [
    ("POST", r"/v1/checkout/sessions", "_create_session"),
    ("GET", r"/v1/checkout/sessions/([^/]+)", "_get_session"),
    ("POST", r"/v1/checkout/sessions/([^/]+)/expire", "_expire_session"),
    ("GET", r"/v1/payment_intents/([^/]+)", "_get_intent"),
    ("POST", r"/v1/payment_intents/([^/]+)/capture", "_capture"),
    ("POST", r"/v1/payment_intents/([^/]+)/cancel", "_cancel"),
    ("POST", r"/v1/refunds", "_create_refund"),
    ("GET", r"/v1/refunds", "_list_refunds"),
    ("GET", r"/v1/refunds/([^/]+)", "_get_refund"),
]


class StripeServer:
    def __init__(
        self,
        api_key: str = "sk_test_shop",
        webhook_secret: str = "whsec_test_shop",
        webhook_url: str | None = None,
        *,
        port: int = 0,
        auto_deliver: bool = False,
    ):
        """`auto_deliver`: deliver the events an API call queued right after answering
        it (for running against the shop by hand; tests call deliver())."""
        self.api_key, self.webhook_secret, self.webhook_url = api_key, webhook_secret, webhook_url
        self.auto_deliver = auto_deliver
        self.refund_status = "succeeded"  # of the refunds made from now on ("pending": settled by a driver later)
        self.calls: list[Call] = []
        self.events: list[dict] = []
        self.sessions: dict[str, dict] = {}
        self.payment_intents: dict[str, dict] = {}
        self.charges: dict[str, dict] = {}
        self.refunds: dict[str, dict] = {}
        self._lock = threading.RLock()
        self._delivering = threading.Lock()
        self._intent_data: dict[str, dict] = {}  # a session's payment_intent_data, for the PaymentIntent it makes
        self._saved: dict[str, _Saved] = {}
        self._delivered: set[str] = set()
        self._faults: list[int] = []
        self._delays: list[float] = []
        self._request: tuple[str | None, str | None] = (None, None)  # the API request acting now, for its events
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.stripe = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()

    # --- what tests set and read -------------------------------------------------------------

    def fail_next(self, count: int, status: int = 500) -> None:
        """The next `count` API requests are answered `status` with Stripe's error body, not acted on."""
        with self._lock:
            self._faults.extend([status] * count)

    def delay_next(self, count: int, seconds: float) -> None:
        """The next `count` API requests act at once but answer `seconds` later."""
        with self._lock:
            self._delays.extend([seconds] * count)

    def called(self, method: str, path_prefix: str = "/") -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.method == method and call.path.startswith(path_prefix)]

    # --- the shopper and the card network ----------------------------------------------------

    def pay(self, session_id: str) -> list[dict]:
        """The shopper pays on the hosted page: the session's PaymentIntent is authorized
        (manual capture) or paid (automatic)."""
        with self._lock:
            session = self._open_session(session_id)
            intent = self._session_intent(session)
            manual = intent["capture_method"] == "manual"
            charge = self._new_charge(intent, captured=not manual)
            intent.update(
                status="requires_capture" if manual else "succeeded",
                amount_capturable=intent["amount"] if manual else 0,
                amount_received=0 if manual else intent["amount"],
                latest_charge=charge["id"],
                last_payment_error=None,
                payment_method=charge["payment_method"],
            )
            # A held payment is not paid: its funds are not in the account until captured.
            session.update(
                status="complete",
                payment_status="unpaid" if manual else "paid",
                url=None,
                customer_details={"email": "shopper@example.com", "name": "Jenny Rosen"},
            )
            follow = "payment_intent.amount_capturable_updated" if manual else "payment_intent.succeeded"
            return [self._emit("checkout.session.completed", session), self._emit(follow, intent)]

    def decline(self, session_id: str, decline_code: str = "generic_decline") -> list[dict]:
        """The card is declined on the hosted page; the session stays open for another try."""
        with self._lock:
            session = self._open_session(session_id)
            intent = self._session_intent(session)
            charge = self._new_charge(intent, captured=False, decline_code=decline_code)
            intent.update(
                status="requires_payment_method",
                latest_charge=charge["id"],
                payment_method=None,
                last_payment_error={
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": decline_code,
                    "message": charge["failure_message"],
                    "doc_url": "https://stripe.com/docs/error-codes/card-declined",
                    "charge": charge["id"],
                    "payment_method": {"id": charge["payment_method"], "object": "payment_method", "type": "card"},
                },
            )
            return [self._emit("payment_intent.payment_failed", intent)]

    def lapse(self, payment_intent_id: str) -> list[dict]:
        """The authorization ran out: Stripe cancels the PaymentIntent (reason "automatic")."""
        with self._lock:
            intent = self._driven(self.payment_intents, payment_intent_id)
            if intent["status"] != "requires_capture":
                raise ValueError(f"{payment_intent_id} is {intent['status']}, not requires_capture")
            self._cancel_intent(intent, "automatic")
            return [self._emit("payment_intent.canceled", intent)]

    def refund_fails(self, refund_id: str) -> list[dict]:
        """The refund could not reach the card; its money is back on the balance."""
        with self._lock:
            refund = self._driven(self.refunds, refund_id)
            if refund["status"] not in ("pending", "succeeded"):
                raise ValueError(f"{refund_id} is {refund['status']}")
            previous = {"status": refund["status"]}
            refund.update(status="failed", failure_reason="expired_or_canceled_card", failure_balance_transaction=None)
            charge = self.charges[refund["charge"]]
            charge.update(amount_refunded=charge["amount_refunded"] - refund["amount"], refunded=False)
            return [self._emit("refund.failed", refund), self._emit("refund.updated", refund, previous)]

    def refund_succeeds(self, refund_id: str) -> list[dict]:
        """A pending refund went through."""
        with self._lock:
            refund = self._driven(self.refunds, refund_id)
            if refund["status"] != "pending":
                raise ValueError(f"{refund_id} is {refund['status']}, not pending")
            refund["status"] = "succeeded"
            return [self._emit("refund.updated", refund, {"status": "pending"})]

    # --- events and webhooks -----------------------------------------------------------------

    def event(self, type: str, obj: dict, previous: dict | None = None) -> dict:
        """A Stripe event about `obj` as it is now (`previous`: its previous_attributes)."""
        request_id, key = self._request
        data = {"object": copy.deepcopy(obj)}
        if previous is not None:
            data["previous_attributes"] = previous
        return {
            "id": _id("evt_"),
            "object": "event",
            "api_version": stripe.api_version,
            "created": _now(),
            "data": data,
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": request_id, "idempotency_key": key},
            "type": type,
        }

    def signature(self, payload: bytes, timestamp: int | None = None, secret: str | None = None) -> str:
        """The Stripe-Signature header of `payload`, as Stripe signs a webhook."""
        timestamp = _now() if timestamp is None else timestamp
        signed = f"{timestamp}.".encode() + payload
        digest = hmac.new((secret or self.webhook_secret).encode(), signed, hashlib.sha256).hexdigest()
        return f"t={timestamp},v1={digest}"

    def signed(self, event: dict) -> tuple[bytes, str]:
        payload = json.dumps(event, indent=2).encode()
        return payload, self.signature(payload)

    def deliver(self, events: list[dict] | None = None) -> list[int]:
        """POST `events` (default: every one not yet delivered, in order) signed to
        webhook_url; the statuses it answered (0: no answer). An event answered
        other than 2xx stays undelivered, as Stripe retries it."""
        if not self.webhook_url:
            return []
        statuses = []
        with self._delivering:
            with self._lock:
                pending = [event for event in self.events if event["id"] not in self._delivered]
            for event in pending if events is None else events:
                statuses.append(self._post_event(event))
                if 200 <= statuses[-1] < 300:
                    with self._lock:
                        self._delivered.add(event["id"])
        return statuses

    def _post_event(self, event: dict) -> int:
        payload, header = self.signed(event)
        headers = {"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": header}
        request = urllib.request.Request(self.webhook_url, data=payload, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0

    def _emit(self, type: str, obj: dict, previous: dict | None = None) -> dict:
        event = self.event(type, obj, previous)
        self.events.append(event)
        return event

    # --- HTTP ----------------------------------------------------------------------------------

    def answer(self, method: str, target: str, headers, body: bytes) -> tuple[int, dict, bytes]:
        """The status, headers and body of the answer to one HTTP request."""
        url = urlsplit(target)
        if url.path.startswith("/pay/"):
            return self._pay_page(method, unquote(url.path.removeprefix("/pay/")), body)
        if url.path.startswith("/_test/"):
            return self._test_hook(method, url.path)
        params = parse_form(url.query if method == "GET" else body.decode())
        key = headers.get("Idempotency-Key") if method == "POST" else None
        request_id = _id("req_", 14)
        out = {"Content-Type": "application/json", "Request-Id": request_id}
        out["Stripe-Version"] = headers.get("Stripe-Version") or stripe.api_version
        if key:
            out["Idempotency-Key"] = key
        with self._lock:
            self.calls.append(Call(method, url.path, params, key))
            delay = self._delays.pop(0) if self._delays else 0
            if not self._authorized(headers.get("Authorization")):
                status, content = self._unauthorized(headers.get("Authorization"))
                out["WWW-Authenticate"] = 'Basic realm="Stripe"'
            elif self._faults:
                fault = _fault(self._faults.pop(0))
                status, content = fault.status, json.dumps(fault.body, indent=2).encode()
            else:
                status, content, original = self._act(method, url.path, params, key, request_id)
                if original:
                    out |= {"Idempotent-Replayed": "true", "Original-Request": original}
        if delay:
            time.sleep(delay)
        return status, out, content

    def _authorized(self, header: str | None) -> bool:
        return hmac.compare_digest(_key_of(header).encode(), self.api_key.encode())

    def _unauthorized(self, header: str | None) -> tuple[int, bytes]:
        key = _key_of(header)
        if key:
            message = f"Invalid API Key provided: {key[:8]}{'*' * max(len(key) - 12, 0)}{key[-4:]}"
        else:
            message = (
                "You did not provide an API key. You need to provide your API key in the Authorization header, "
                "using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#"
                "authentication for details, or we can help at https://support.stripe.com/."
            )
        return 401, json.dumps(StripeRefusal(401, "invalid_request_error", message).body, indent=2).encode()

    def _act(self, method: str, path: str, params: dict, key: str | None, request_id: str):
        """(status, body, the replayed request's id or None), under the lock."""
        saved = self._saved.get(key) if key else None
        if saved and (saved.method, saved.path) != (method, path):
            refusal = StripeRefusal(
                400,
                "idempotency_error",
                f"Keys for idempotent requests can only be used for the same endpoint they were first used for "
                f"('{saved.path}' vs '{path}'). Try using a key other than '{key}' if you meant to execute a "
                "different request.",
            )
            return 400, json.dumps(refusal.body, indent=2).encode(), None
        if saved and saved.params != params:
            refusal = StripeRefusal(
                400,
                "idempotency_error",
                "Keys for idempotent requests can only be used with the same parameters they were first used with. "
                f"Try using a key other than '{key}' if you meant to execute a different request.",
            )
            return 400, json.dumps(refusal.body, indent=2).encode(), None
        if saved:
            return saved.status, saved.body, saved.request_id
        self._request = (request_id, key)
        try:
            status, content, keep = 200, json.dumps(self._route(method, path, params), indent=2).encode(), True
        except StripeRefusal as refusal:
            status, content, keep = refusal.status, json.dumps(refusal.body, indent=2).encode(), refusal.saved
        finally:
            self._request = (None, None)
        if key and keep:
            self._saved[key] = _Saved(method, path, params, status, content, request_id)
        return status, content, None

    def _route(self, method: str, path: str, params: dict) -> dict:
        for route_method, pattern, name in ROUTES:
            match = re.fullmatch(pattern, path)
            if match and route_method == method:
                return getattr(self, name)(*map(unquote, match.groups()), params)
        raise StripeRefusal(
            404,
            "invalid_request_error",
            f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can help at "
            "https://support.stripe.com/.",
            saved=False,
        )

    def after_answer(self) -> None:
        if self.auto_deliver:
            self.deliver()

    # --- Checkout Sessions -----------------------------------------------------------------------

    def _create_session(self, params: dict) -> dict:
        _allow(params, SESSION_PARAMS)
        for name in ("mode", "line_items", "success_url"):
            if not params.get(name):
                raise _missing(name)
        if params["mode"] != "payment":
            raise _invalid("Only mode=payment is served here.", param="mode", saved=False)
        amount, currency = self._line_items(params["line_items"])
        intent_data = params.get("payment_intent_data") or {}
        _allow(intent_data, {"capture_method", "metadata", "description"}, "payment_intent_data")
        capture = intent_data.get("capture_method", "automatic")
        if capture not in CAPTURE_METHODS:
            param = "payment_intent_data[capture_method]"
            raise _invalid(f"Invalid {param}: must be one of {', '.join(CAPTURE_METHODS)}", param=param, saved=False)
        now = _now()
        expires_at = _int(params, "expires_at", now + SESSION_MAX_SECONDS)
        if expires_at < now + SESSION_MIN_SECONDS:
            raise _invalid(
                "The `expires_at` timestamp must be at least 30 minutes from Checkout Session creation.",
                param="expires_at",
                saved=False,
            )
        if expires_at > now + SESSION_MAX_SECONDS:
            raise _invalid(
                "The `expires_at` timestamp must be less than 24 hours from Checkout Session creation.",
                param="expires_at",
                saved=False,
            )
        session_id = _id("cs_test_", 58)
        session = {
            "id": session_id,
            "object": "checkout.session",
            "amount_subtotal": amount,
            "amount_total": amount,
            "cancel_url": params.get("cancel_url"),
            "client_reference_id": params.get("client_reference_id"),
            "client_secret": None,
            "created": now,
            "currency": currency,
            "customer": None,
            "customer_details": None,
            "customer_email": params.get("customer_email"),
            "expires_at": expires_at,
            "livemode": False,
            "metadata": _metadata(params.get("metadata")),
            "mode": "payment",
            "payment_intent": None,  # made when the shopper first confirms (API versions since 2022-08-01)
            "payment_method_types": params.get("payment_method_types") or ["card"],
            "payment_status": "unpaid",
            "status": "open",
            "success_url": params["success_url"],
            "url": f"{self.url}/pay/{session_id}",
        }
        self.sessions[session_id] = session
        self._intent_data[session_id] = {
            "capture_method": capture,
            "metadata": _metadata(intent_data.get("metadata")),
            "description": intent_data.get("description"),
        }
        return session

    def _line_items(self, items) -> tuple[int, str]:
        """The total and the currency of line_items given with price_data."""
        if not isinstance(items, list):
            raise _invalid("Invalid array", param="line_items", saved=False)
        amount, currencies = 0, set()
        for index, item in enumerate(items):
            at = f"line_items[{index}]"
            price = item.get("price_data") if isinstance(item, dict) else None
            if not isinstance(price, dict):
                raise _missing(f"{at}[price_data]")
            for name in ("currency", "unit_amount"):
                if name not in price:
                    raise _missing(f"{at}[price_data][{name}]")
            if not (price.get("product_data") or {}).get("name"):
                raise _missing(f"{at}[price_data][product_data][name]")
            if "quantity" not in item:
                raise _missing(f"{at}[quantity]")
            unit = _int(price, "unit_amount")
            quantity = _int(item, "quantity", minimum=1)
            amount += unit * quantity
            currencies.add(price["currency"].lower())
        if len(currencies) != 1:
            raise _invalid("All line_items must share one currency.", param="line_items", saved=False)
        return amount, currencies.pop()

    def _get_session(self, session_id: str, params: dict) -> dict:
        _allow(params, set())
        return self._session(session_id)

    def _expire_session(self, session_id: str, params: dict) -> dict:
        _allow(params, set())
        session = self._session(session_id)
        if session["status"] != "open":
            raise _invalid(
                'Only Checkout Sessions with a status in ["open"] can be expired. '
                f"This Checkout Session has a status of `{session['status']}`."
            )
        session.update(status="expired", url=None)
        self._emit("checkout.session.expired", session)
        return session

    def _session(self, session_id: str) -> dict:
        if session_id not in self.sessions:
            raise _no_such("checkout.session", session_id, "session")
        return self.sessions[session_id]

    def _open_session(self, session_id: str) -> dict:
        session = self._driven(self.sessions, session_id)
        if session["status"] != "open":
            raise ValueError(f"{session_id} is {session['status']}, not open")
        return session

    def _session_intent(self, session: dict) -> dict:
        """The session's one PaymentIntent, made on the shopper's first try."""
        if session["payment_intent"]:
            return self.payment_intents[session["payment_intent"]]
        data = self._intent_data[session["id"]]
        intent_id = _id("pi_")
        intent = {
            "id": intent_id,
            "object": "payment_intent",
            "amount": session["amount_total"],
            "amount_capturable": 0,
            "amount_details": {"tip": {}},
            "amount_received": 0,
            "canceled_at": None,
            "cancellation_reason": None,
            "capture_method": data["capture_method"],
            "client_secret": f"{intent_id}_secret_{_id('', 25)}",
            "confirmation_method": "automatic",
            "created": _now(),
            "currency": session["currency"],
            "customer": None,
            "description": data["description"],
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": dict(data["metadata"]),
            "payment_method": None,
            "payment_method_types": ["card"],
            "status": "requires_payment_method",
        }
        self.payment_intents[intent_id] = intent
        session["payment_intent"] = intent_id
        return intent

    def _new_charge(self, intent: dict, *, captured: bool, decline_code: str | None = None) -> dict:
        declined = decline_code is not None
        charge = {
            "id": _id("ch_"),
            "object": "charge",
            "amount": intent["amount"],
            "amount_captured": intent["amount"] if captured else 0,
            "amount_refunded": 0,
            "captured": captured,
            "created": _now(),
            "currency": intent["currency"],
            "customer": None,
            "description": intent["description"],
            "disputed": False,
            "failure_code": "card_declined" if declined else None,
            "failure_message": DECLINE_MESSAGES.get(decline_code, "Your card was declined.") if declined else None,
            "livemode": False,
            "metadata": dict(intent["metadata"]),
            "outcome": {
                "network_status": "declined_by_network" if declined else "approved_by_network",
                "reason": decline_code,
                "risk_level": "normal",
                "seller_message": "The bank declined the payment." if declined else "Payment complete.",
                "type": "issuer_declined" if declined else "authorized",
            },
            "paid": not declined,
            "payment_intent": intent["id"],
            "payment_method": _id("pm_"),
            "payment_method_details": {"type": "card", "card": {"brand": "visa", "last4": "4242", "funding": "credit"}},
            "refunded": False,
            "status": "failed" if declined else "succeeded",
        }
        self.charges[charge["id"]] = charge
        return charge

    # --- PaymentIntents ------------------------------------------------------------------------

    def _get_intent(self, intent_id: str, params: dict) -> dict:
        _allow(params, {"client_secret"})
        return self._intent(intent_id)

    def _intent(self, intent_id: str, param: str = "intent") -> dict:
        if intent_id not in self.payment_intents:
            raise _no_such("payment_intent", intent_id, param)
        return self.payment_intents[intent_id]

    def _capture(self, intent_id: str, params: dict) -> dict:
        _allow(params, {"amount_to_capture", "metadata"})
        intent = self._intent(intent_id)
        amount = _int(params, "amount_to_capture", minimum=1)
        if intent["status"] != "requires_capture":
            raise _unexpected_state(
                intent,
                f"This PaymentIntent could not be captured because it has a status of {intent['status']}. "
                "Only a PaymentIntent with one of the following statuses may be captured: requires_capture.",
            )
        capturable = intent["amount_capturable"]
        amount = capturable if amount is None else amount
        if amount > capturable:
            raise _invalid(
                f"The amount to capture ({amount}) is greater than the amount capturable ({capturable}).",
                code="amount_too_large",
                param="amount_to_capture",
            )
        intent["metadata"] |= _metadata(params.get("metadata"))
        intent.update(status="succeeded", amount_received=amount, amount_capturable=0)
        # The uncaptured rest is released, and Stripe counts it as refunded on the charge.
        charge = self.charges[intent["latest_charge"]]
        charge.update(captured=True, amount_captured=amount, amount_refunded=charge["amount"] - amount)
        self._emit("charge.captured", charge)
        self._emit("payment_intent.succeeded", intent)
        return intent

    def _cancel(self, intent_id: str, params: dict) -> dict:
        _allow(params, {"cancellation_reason"})
        intent = self._intent(intent_id)
        reason = params.get("cancellation_reason")
        if reason is not None and reason not in CANCELLATION_REASONS:
            raise _invalid(
                f"Invalid cancellation_reason: must be one of {', '.join(CANCELLATION_REASONS)}",
                param="cancellation_reason",
                saved=False,
            )
        if intent["status"] not in CANCELABLE:
            raise _unexpected_state(
                intent,
                f"You cannot cancel this PaymentIntent because it has a status of {intent['status']}. "
                f"Only a PaymentIntent with one of the following statuses may be canceled: {', '.join(CANCELABLE)}.",
            )
        self._cancel_intent(intent, reason)
        self._emit("payment_intent.canceled", intent)
        return intent

    def _cancel_intent(self, intent: dict, reason: str | None) -> None:
        if intent["status"] == "requires_capture":  # the held charge is released, marked refunded
            charge = self.charges[intent["latest_charge"]]
            charge.update(amount_refunded=charge["amount"], refunded=True)
        intent.update(status="canceled", canceled_at=_now(), cancellation_reason=reason, amount_capturable=0)

    # --- Refunds -------------------------------------------------------------------------------

    def _create_refund(self, params: dict) -> dict:
        _allow(params, {"payment_intent", "charge", "amount", "metadata", "reason"})
        if "charge" in params:
            if params["charge"] not in self.charges:
                raise _no_such("charge", params["charge"], "charge")
            intent = self.payment_intents[self.charges[params["charge"]]["payment_intent"]]
        elif "payment_intent" in params:
            intent = self._intent(params["payment_intent"], "payment_intent")
        else:
            raise _invalid(
                "One of the following params should be provided for this request: payment_intent or charge.",
                saved=False,
            )
        if intent["status"] != "succeeded":
            raise _invalid(
                f"This PaymentIntent ({intent['id']}) does not have a successful charge to refund.",
                param="payment_intent",
            )
        charge = self.charges[intent["latest_charge"]]
        left = intent["amount_received"] - self._refunded(charge["id"])
        amount = _int(params, "amount", left, minimum=1)
        if not left:
            raise _invalid(f"Charge {charge['id']} has already been refunded.", code="charge_already_refunded")
        if amount > left:
            raise _invalid(
                f"Refund amount ({_money(amount, charge['currency'])}) is greater than unrefunded amount on charge "
                f"({_money(left, charge['currency'])})",
                code="amount_too_large",
                param="amount",
            )
        reason = params.get("reason")
        if reason is not None and reason not in REFUND_REASONS:
            raise _invalid(
                "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer",
                param="reason",
                saved=False,
            )
        refund = {
            "id": _id("re_"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": None,
            "charge": charge["id"],
            "created": _now(),
            "currency": charge["currency"],
            "destination_details": {"card": {"type": "refund"}, "type": "card"},
            "metadata": _metadata(params.get("metadata")),
            "payment_intent": intent["id"],
            "reason": reason,
            "receipt_number": None,
            "source_transfer_reversal": None,
            "status": self.refund_status,
            "transfer_reversal": None,
        }
        self.refunds[refund["id"]] = refund
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        self._emit("refund.created", refund)
        self._emit("charge.refunded", charge)  # without its refunds: API versions since 2022-11-15 leave them out
        return refund

    def _refunded(self, charge_id: str) -> int:
        return sum(
            refund["amount"]
            for refund in self.refunds.values()
            if refund["charge"] == charge_id and refund["status"] not in ("failed", "canceled")
        )

    def _list_refunds(self, params: dict) -> dict:
        _allow(params, {"payment_intent", "charge", "limit", "starting_after"})
        limit = _int(params, "limit", 10, minimum=1)
        if limit > 100:
            raise _invalid("This value must be less than or equal to 100.", param="limit", saved=False)
        refunds = [
            refund
            for refund in reversed(self.refunds.values())  # newest first
            if params.get("payment_intent", refund["payment_intent"]) == refund["payment_intent"]
            and params.get("charge", refund["charge"]) == refund["charge"]
        ]
        if "starting_after" in params:
            ids = [refund["id"] for refund in refunds]
            refunds = refunds[ids.index(params["starting_after"]) + 1 :] if params["starting_after"] in ids else []
        return {"object": "list", "data": refunds[:limit], "has_more": len(refunds) > limit, "url": "/v1/refunds"}

    def _get_refund(self, refund_id: str, params: dict) -> dict:
        _allow(params, set())
        if refund_id not in self.refunds:
            raise _no_such("refund", refund_id, "refund")
        return self.refunds[refund_id]

    def _driven(self, objects: dict, object_id: str) -> dict:
        if object_id not in objects:
            raise ValueError(f"no such object: {object_id}")
        return objects[object_id]

    # --- pages for a person and a shell --------------------------------------------------------

    def _pay_page(self, method: str, session_id: str, body: bytes) -> tuple[int, dict, bytes]:
        with self._lock:
            session = copy.deepcopy(self.sessions.get(session_id))
        if session is None:
            return _page(404, "No such Checkout Session", f"<p>No session {html.escape(session_id)}.</p>")
        if method == "GET":
            total = html.escape(_money(session["amount_total"], session["currency"]))
            return _page(
                200,
                f"Pay {total}",
                f"<p>Checkout Session {html.escape(session_id)} is {session['status']}.</p>"
                '<form method="post"><button name="action" value="pay">Pay</button> '
                '<button name="action" value="decline">Decline</button></form>',
            )
        action = parse_form(body.decode()).get("action")
        try:
            events = self.pay(session_id) if action == "pay" else self.decline(session_id)
        except ValueError as error:
            return _page(409, "Not paid", f"<p>{html.escape(str(error))}.</p>")
        statuses = self.deliver(events)
        back = session["success_url"] if action == "pay" else session["cancel_url"]
        return _page(
            200,
            "Paid" if action == "pay" else "Declined",
            f"<p>Events: {', '.join(event['type'] for event in events)}.</p>"
            f"<p>Webhook answers: {', '.join(map(str, statuses)) or 'no webhook URL set'}.</p>"
            + (f'<p><a href="{html.escape(back)}">Back to the shop</a></p>' if back else ""),
        )

    def _test_hook(self, method: str, path: str) -> tuple[int, dict, bytes]:
        match = re.fullmatch(r"/_test/payment_intents/([^/]+)/lapse", path)
        if not (match and method == "POST"):
            return 404, {"Content-Type": "application/json"}, b'{"error": "unknown test hook"}'
        try:
            events = self.lapse(unquote(match[1]))
        except ValueError as error:
            return 409, {"Content-Type": "application/json"}, json.dumps({"error": str(error)}).encode()
        answer = {"events": [event["type"] for event in events], "deliveries": self.deliver(events)}
        return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()


def _page(status: int, title: str, body: str) -> tuple[int, dict, bytes]:
    text = f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title></head>'
    text += f"<body><h1>{title}</h1>{body}</body></html>"
    return status, {"Content-Type": "text/html; charset=utf-8"}, text.encode()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    stripe: StripeServer

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # else a client gave up waiting: a timeout test
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def do_GET(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, headers, content = self.server.stripe.answer(self.command, self.path, self.headers, body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)
        self.wfile.flush()
        if self.path.startswith("/v1/"):
            self.server.stripe.after_answer()

    do_POST = do_DELETE = do_GET  # noqa: N815 - http.server's names

    def log_message(self, format, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description="A local Stripe API for the shop's Stripe adapter.")
    parser.add_argument("--port", type=int, default=12111)
    parser.add_argument("--api-key", default="sk_test_shop")
    parser.add_argument("--webhook-url", default=None, help="where events are POSTed (the shop's webhook)")
    parser.add_argument("--webhook-secret", default="whsec_test_shop")
    args = parser.parse_args()
    server = StripeServer(
        args.api_key, args.webhook_secret, args.webhook_url, port=args.port, auto_deliver=bool(args.webhook_url)
    )
    print(f"Stripe test server at {server.url} (key {args.api_key}, webhook secret {args.webhook_secret})", flush=True)
    print(f"Webhooks to {args.webhook_url or 'nowhere (no --webhook-url)'}; pay at {server.url}/pay/<session id>")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
