"""The local Stripe server (tests/stripe_server.py) as the official library sees it."""

import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import stripe

from tests.stripe_server import StripeServer, parse_form


@pytest.fixture
def server():
    with StripeServer() as server:
        yield server


def client(server: StripeServer, retries: int = 0, **options) -> stripe.StripeClient:
    return stripe.StripeClient(
        server.api_key, base_addresses={"api": server.url}, max_network_retries=retries, **options
    )


def session_params(*, capture: str = "manual", amount: int = 2500, **changes) -> dict:
    """What the shop's adapter sends for order 7."""
    metadata = {"order_id": "7"}
    return {
        "mode": "payment",
        "payment_method_types": ["card"],
        "line_items": [
            {
                "quantity": 1,
                "price_data": {"currency": "EUR", "unit_amount": amount, "product_data": {"name": "Order 7"}},
            }
        ],
        "payment_intent_data": {"capture_method": capture, "metadata": metadata},
        "metadata": metadata,
        "client_reference_id": "7",
        "expires_at": int(time.time()) + 3600,
        "success_url": "http://shop.test/paid",
        "cancel_url": "http://shop.test/not-paid",
        **changes,
    }


def paid_session(server: StripeServer, capture: str = "manual") -> dict:
    session = client(server).v1.checkout.sessions.create(params=session_params(capture=capture))
    server.pay(session.id)
    return server.sessions[session.id]


def types(events: list[dict]) -> list[str]:
    return [event["type"] for event in events]


def test_parse_form_nests_keys_and_lists():
    parsed = parse_form("a[b][c]=1&items[1][x]=3&items[0][x]=2&metadata=&tags[]=p&tags[]=q")

    assert parsed == {"a": {"b": {"c": "1"}}, "items": [{"x": "2"}, {"x": "3"}], "metadata": "", "tags": ["p", "q"]}


def test_session_create_answers_an_open_session_and_replays_its_key(server):
    stripe_client = client(server)

    session = stripe_client.v1.checkout.sessions.create(params=session_params(), options={"idempotency_key": "k-1"})
    again = stripe_client.v1.checkout.sessions.create(params=session_params(), options={"idempotency_key": "k-1"})

    assert session.id.startswith("cs_test_") and session.url == f"{server.url}/pay/{session.id}"
    assert (session.amount_total, session.currency, session.status, session.payment_status) == (
        2500,
        "eur",
        "open",
        "unpaid",
    )
    assert session.payment_intent is None and session.metadata.to_dict() == {"order_id": "7"}
    assert again.id == session.id and again.last_response.headers["Idempotent-Replayed"] == "true"
    assert len(server.sessions) == 1
    assert [call.idempotency_key for call in server.called("POST", "/v1/checkout/sessions")] == ["k-1", "k-1"]
    with pytest.raises(stripe.IdempotencyError):
        stripe_client.v1.checkout.sessions.create(params=session_params(amount=99), options={"idempotency_key": "k-1"})


def test_session_create_refuses_as_stripe_does(server):
    stripe_client = client(server)
    params = session_params()
    del params["success_url"]

    with pytest.raises(stripe.InvalidRequestError) as missing:
        stripe_client.v1.checkout.sessions.create(params=params)
    with pytest.raises(stripe.InvalidRequestError) as too_soon:
        stripe_client.v1.checkout.sessions.create(params=session_params(expires_at=int(time.time()) + 600))
    with pytest.raises(stripe.AuthenticationError):
        stripe.StripeClient("sk_test_other", base_addresses={"api": server.url}).v1.checkout.sessions.create(
            params=session_params()
        )

    assert (missing.value.code, missing.value.param, missing.value.http_status) == (
        "parameter_missing",
        "success_url",
        400,
    )
    assert too_soon.value.param == "expires_at"
    assert not server.sessions


def test_pay_manual_then_capture_part_and_refund(server):
    stripe_client = client(server)
    session = stripe_client.v1.checkout.sessions.create(params=session_params())

    paid = server.pay(session.id)
    intent_id = server.sessions[session.id]["payment_intent"]
    captured = stripe_client.v1.payment_intents.capture(intent_id, params={"amount_to_capture": 2000})
    refund = stripe_client.v1.refunds.create(
        params={"payment_intent": intent_id, "amount": 500, "metadata": {"refund_id": "3"}}
    )
    listed = stripe_client.v1.refunds.list(params={"charge": refund.charge, "limit": 100})

    assert types(paid) == ["checkout.session.completed", "payment_intent.amount_capturable_updated"]
    assert paid[0]["data"]["object"]["payment_status"] == "unpaid"
    assert paid[1]["data"]["object"]["amount_capturable"] == 2500
    assert (captured.status, captured.amount_received, captured.amount_capturable) == ("succeeded", 2000, 0)
    assert (refund.object, refund.status, refund.amount, refund.currency) == ("refund", "succeeded", 500, "eur")
    assert refund.payment_intent == intent_id and refund.metadata.to_dict() == {"refund_id": "3"}
    assert [item.id for item in listed.data] == [refund.id]
    after_pay = ["charge.captured", "payment_intent.succeeded", "refund.created", "charge.refunded"]
    assert types(server.events[2:]) == after_pay
    assert server.events[-1]["data"]["object"]["payment_intent"] == intent_id
    with pytest.raises(stripe.InvalidRequestError) as too_much:
        stripe_client.v1.refunds.create(params={"payment_intent": intent_id, "amount": 1600})
    assert (too_much.value.code, too_much.value.param) == ("amount_too_large", "amount")


def test_pay_automatic_is_paid_at_once(server):
    session = client(server).v1.checkout.sessions.create(params=session_params(capture="automatic"))

    events = server.pay(session.id)

    assert types(events) == ["checkout.session.completed", "payment_intent.succeeded"]
    assert events[0]["data"]["object"]["payment_status"] == "paid"
    assert events[1]["data"]["object"]["amount_received"] == 2500


def test_decline_then_pay_keeps_the_payment_intent(server):
    session = client(server).v1.checkout.sessions.create(params=session_params())

    declined = server.decline(session.id, "insufficient_funds")
    paid = server.pay(session.id)

    failed = declined[0]["data"]["object"]
    assert types(declined) == ["payment_intent.payment_failed"]
    assert failed["status"] == "requires_payment_method"
    assert failed["last_payment_error"]["decline_code"] == "insufficient_funds"
    assert paid[1]["data"]["object"]["id"] == failed["id"]


def test_fail_next_500_is_retried_under_one_key(server):
    server.fail_next(2, 500)

    session = client(server, retries=2).v1.checkout.sessions.create(params=session_params())

    calls = server.called("POST", "/v1/checkout/sessions")
    assert list(server.sessions) == [session.id]
    assert len(calls) == 3 and len({call.idempotency_key for call in calls}) == 1


def test_fail_next_429_raises_rate_limit_error(server):
    server.fail_next(1, 429)

    with pytest.raises(stripe.RateLimitError) as limited:
        client(server).v1.checkout.sessions.create(params=session_params())

    assert limited.value.error.code == "rate_limit" and not server.sessions


def test_delay_next_outlasts_a_client_timeout_after_acting(server):
    server.delay_next(1, 0.5)
    slow_client = client(server, http_client=stripe.RequestsClient(timeout=0.1))

    with pytest.raises(stripe.APIConnectionError):
        slow_client.v1.checkout.sessions.create(params=session_params())

    assert len(server.sessions) == 1


def test_capture_of_a_lapsed_payment_intent_is_refused(server):
    intent_id = paid_session(server)["payment_intent"]

    lapsed = server.lapse(intent_id)
    with pytest.raises(stripe.InvalidRequestError) as refused:
        client(server).v1.payment_intents.capture(intent_id)

    assert types(lapsed) == ["payment_intent.canceled"]
    assert lapsed[0]["data"]["object"]["cancellation_reason"] == "automatic"
    assert refused.value.code == "payment_intent_unexpected_state"
    assert "status of canceled" in refused.value.user_message
    assert refused.value.json_body["error"]["payment_intent"]["status"] == "canceled"


def test_refund_pending_then_failed(server):
    server.refund_status = "pending"
    intent_id = paid_session(server, capture="automatic")["payment_intent"]
    refund = client(server).v1.refunds.create(params={"payment_intent": intent_id})

    events = server.refund_fails(refund.id)

    assert refund.status == "pending" and refund.amount == 2500
    assert types(events) == ["refund.failed", "refund.updated"]
    assert events[0]["data"]["object"]["failure_reason"] == "expired_or_canceled_card"
    assert events[1]["data"]["previous_attributes"] == {"status": "pending"}


def test_unknown_url_is_a_404(server):
    request = urllib.request.Request(f"{server.url}/v1/nope", headers={"Authorization": f"Bearer {server.api_key}"})

    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=5)

    assert answer.value.code == 404 and answer.value.headers["Request-Id"].startswith("req_")
    assert b"Unrecognized request URL (GET: /v1/nope)" in answer.value.read()


def test_signed_event_verifies_and_a_changed_body_does_not(server):
    event = server.event("payment_intent.succeeded", {"id": "pi_1", "object": "payment_intent"})
    payload, header = server.signed(event)

    verified = stripe.Webhook.construct_event(payload, header, server.webhook_secret)

    assert verified.id == event["id"] and verified.api_version == stripe.api_version
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(payload.replace(b"pi_1", b"pi_2"), header, server.webhook_secret)


def test_pay_page_pays_and_delivers_signed_events():
    received = []

    class Webhook(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((body, self.headers["Stripe-Signature"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    webhook = ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    threading.Thread(target=webhook.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        with StripeServer(webhook_url=f"http://127.0.0.1:{webhook.server_address[1]}/hook") as server:
            session = client(server).v1.checkout.sessions.create(params=session_params())
            page = urllib.request.urlopen(session.url, timeout=5).read().decode()
            done = urllib.request.urlopen(session.url, data=b"action=pay", timeout=5).read().decode()

            assert "€25.00" in page and "Webhook answers: 200, 200" in done
            assert server.deliver() == []  # nothing is left undelivered
            events = [stripe.Webhook.construct_event(body, header, server.webhook_secret) for body, header in received]
            assert [event.type for event in events] == types(server.events)
    finally:
        webhook.shutdown()
        webhook.server_close()
