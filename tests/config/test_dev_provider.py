"""The development payment provider (config/dev_provider.py): its JSON API answers
only the shop (its API key), answers a repeated call alike and acts once, plays
outages when asked, and its pay page sends the signed webhooks before it answers.
The routes are mounted here as `make run` mounts them (config/urls.py adds them only
when DEBUG was on at import)."""

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import include, path

from config import dev_provider
from orders import provider_simulator
from orders.signatures import verify_signature

urlpatterns = [path("dev/payment-provider/", include("config.dev_provider_urls"))]

KEY = "the-shops-provider-key"

SESSION = {
    "order_id": 42,
    "amount": 2338,
    "currency": "EUR",
    "capture": "manual",
    "expires_at": "2030-01-01T12:00:00+00:00",
}
CAPTURE = {"payment_id": "pay_sim_ps_sim_1", "amount": 2338, "currency": "EUR"}
VOID = {"payment_id": "pay_sim_ps_sim_1"}
REFUND = {"refund_id": 7, "payment_id": "pay_sim_ps_sim_1", "amount": 2338, "currency": "EUR"}


class Shop:
    """The shop's webhook on a real socket: records each delivery (headers, raw body)
    and answers `status`."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[dict, bytes]] = []
        self.status = 200
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                shop.deliveries.append((dict(self.headers), body))
                self.send_response(shop.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/payments/webhook"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()  # quick to shut down

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict]:
        """Each delivery's body, once its signature and content type are checked."""
        from django.conf import settings

        for headers, body in self.deliveries:
            assert headers["Content-Type"] == "application/json"
            verify_signature(header=headers["Payment-Signature"], body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)
        return [json.loads(body) for _, body in self.deliveries]


@pytest.fixture(autouse=True)
def dev_routes(settings):
    settings.ROOT_URLCONF = __name__
    settings.DEV_PROVIDER_FAILURE = ""
    settings.PAYMENT_PROVIDER_KEY = KEY


@pytest.fixture
def shop(settings):
    running = Shop()
    settings.DEV_PROVIDER_WEBHOOK_URL = running.url
    yield running
    running.stop()


def call(name: str, body, *, key: str | None = "key-1", authorization: str | None = f"Bearer {KEY}"):
    """POST a JSON API call (`body` as JSON, or a str sent as it is) as the shop does."""
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    if authorization is not None:
        headers["HTTP_AUTHORIZATION"] = authorization
    return Client().post(f"/dev/payment-provider/{name}", body, content_type="application/json", **headers)


def open_session(**fields) -> dict:
    answer = call("sessions", {**SESSION, **fields}, key=f"session-{uuid.uuid4().hex}")
    assert answer.status_code == 200
    return answer.json()


def pay_page(session: dict, action: str | None = None):
    page = f"/dev/payment-provider/pay/{session['id']}"
    return Client().post(page, {"action": action}) if action else Client().get(page)


def acts_after_answering(monkeypatch) -> list[tuple]:
    """What the provider starts to do after its answer, in a thread of its own (a refund's
    confirmation): recorded when started, never run."""
    started = []

    class Recorded:
        def __init__(self, *, target, args=(), daemon=None) -> None:
            self.act = (target.__name__, args)

        def start(self) -> None:
            started.append(self.act)

    monkeypatch.setattr(dev_provider, "threading", SimpleNamespace(Thread=Recorded))
    return started


def stored_session(redis, session: dict) -> dict:
    return json.loads(redis.get(f"dev-provider:session:{session['id']}"))


def test_sessions_opens_one_session_and_a_retry_gets_the_same(redis):
    first, again = call("sessions", SESSION), call("sessions", SESSION)
    assert first.status_code == again.status_code == 200
    assert first.content == again.content
    session = first.json()
    assert session["id"].startswith("ps_sim_")
    assert session["pay_url"] == f"http://testserver/dev/payment-provider/pay/{session['id']}"
    assert session["expires_at"] == SESSION["expires_at"]
    assert redis.keys("dev-provider:session:*") == [f"dev-provider:session:{session['id']}".encode()]
    assert stored_session(redis, session) == {**SESSION, "status": "open"}
    assert 23 * 3600 < redis.ttl(f"dev-provider:session:{session['id']}") <= 24 * 3600

    other = call("sessions", SESSION, key="key-2").json()
    assert other["id"] != session["id"] and len(redis.keys("dev-provider:session:*")) == 2


@pytest.mark.parametrize("amount, shown", [(2338, "€23.38"), (5, "€0.05"), (123456789, "€1,234,567.89")])
def test_pay_page_shows_the_order_the_amount_and_both_buttons(amount, shown):
    page = pay_page(open_session(amount=amount))
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "Order 42" in html and shown in html
    assert html.count('<form method="post">') == 2
    assert 'name="action" value="pay"' in html and 'name="action" value="decline"' in html


def test_pay_with_manual_capture_sends_authorized_signed_and_only_once(shop, redis):
    session = open_session()
    result = pay_page(session, "pay")
    assert result.status_code == 200
    html = result.content.decode()
    assert "Payment authorized" in html and "HTTP 200" in html and "close this page" in html
    assert shop.events() == [
        {
            "type": "payment",
            "payment_id": f"pay_sim_{session['id']}",
            "order_id": 42,
            "amount": 2338,
            "currency": "EUR",
            "status": "authorized",
        }
    ]
    assert stored_session(redis, session)["status"] == "paid"

    again = pay_page(session, "pay")
    assert again.status_code == 200 and "decided already" in again.content.decode()
    shown = pay_page(session).content.decode()
    assert "Payment authorized" in shown and 'value="pay"' not in shown
    assert len(shop.deliveries) == 1  # nothing new: a second click, a reload


def test_pay_clicked_twice_at_once_pays_once(shop):
    session, pages = open_session(), []
    together = threading.Barrier(4)

    def click() -> None:
        together.wait()
        pages.append(pay_page(session, "pay").content.decode())

    clicks = [threading.Thread(target=click) for _ in range(4)]
    for thread in clicks:
        thread.start()
    for thread in clicks:
        thread.join(10)
    assert sorted("decided already" in page for page in pages) == [False, True, True, True]
    assert len(shop.deliveries) == 1


def test_pay_with_automatic_capture_sends_authorized_then_captured(shop):
    session = open_session(capture="automatic")
    assert "Payment authorized and captured" in pay_page(session, "pay").content.decode()
    event = {
        "type": "payment",
        "payment_id": f"pay_sim_{session['id']}",
        "order_id": 42,
        "amount": 2338,
        "currency": "EUR",
    }
    assert shop.events() == [{**event, "status": "authorized"}, {**event, "status": "captured"}]
    pay_page(session, "decline")
    assert len(shop.deliveries) == 2


def test_decline_sends_a_failed_payment_once(shop, redis):
    session = open_session(capture="automatic")
    result = pay_page(session, "decline").content.decode()
    assert "Payment declined" in result and "HTTP 200" in result
    assert shop.events() == [
        {
            "type": "payment",
            "payment_id": f"pay_sim_{session['id']}-declined",
            "order_id": 42,
            "amount": 2338,
            "currency": "EUR",
            "status": "failed",
        }
    ]
    assert stored_session(redis, session)["status"] == "declined"
    assert "Payment declined" in pay_page(session, "pay").content.decode()
    assert len(shop.deliveries) == 1


def test_pay_when_the_shop_refuses_or_is_down_says_so(shop):
    shop.status = 400
    assert "HTTP 400" in pay_page(open_session(), "pay").content.decode()
    shop.stop()
    result = pay_page(open_session(), "pay")
    assert result.status_code == 200 and "could not be delivered" in result.content.decode()


def test_pay_page_of_an_unknown_or_expired_session_is_a_404(shop):
    unknown = pay_page({"id": "ps_sim_nope"})
    assert unknown.status_code == 404 and "no payment session ps_sim_nope" in unknown.content.decode()
    expired = open_session(expires_at="2020-01-01T00:00:00+00:00")
    assert pay_page(expired).status_code == 404 and "has expired" in pay_page(expired).content.decode()
    assert pay_page(expired, "pay").status_code == 404
    assert pay_page({"id": "ps_sim_nope"}, "pay").status_code == 404
    assert shop.deliveries == []


def test_pay_page_refuses_another_action(shop):
    session = open_session()
    assert pay_page(session, "steal").status_code == 400
    assert shop.deliveries == []


@pytest.mark.parametrize(
    "name, body, answer",
    [
        ("captures", CAPTURE, {"id": "pay_sim_ps_sim_1", "status": "captured"}),
        ("voids", VOID, {"id": "pay_sim_ps_sim_1", "status": "voided"}),
    ],
)
def test_captures_and_voids_answer_and_a_retry_gets_the_same(redis, name, body, answer):
    first, again = call(name, body), call(name, body)
    assert first.status_code == again.status_code == 200
    assert first.json() == answer and again.content == first.content
    assert redis.keys("dev-provider:*") == [b"dev-provider:key-1"]


def test_a_refund_is_pending_and_confirmed_after_the_answer_once(monkeypatch):
    later = acts_after_answering(monkeypatch)
    first, again = call("refunds", REFUND), call("refunds", REFUND)
    assert first.json() == {"id": "re_sim_7", "status": "pending"} and again.content == first.content
    assert later == [("_confirm", (REFUND,))]  # the webhook, from a thread of its own


@pytest.mark.parametrize(
    "name, body", [("sessions", SESSION), ("captures", CAPTURE), ("voids", VOID), ("refunds", REFUND)]
)
def test_the_fail_drill_answers_503_and_does_nothing(settings, redis, shop, monkeypatch, name, body):
    later = acts_after_answering(monkeypatch)
    settings.DEV_PROVIDER_FAILURE = "fail"
    answer = call(name, body)
    assert answer.status_code == 503 and answer.json() == {"error": "simulated outage"}
    assert redis.keys("dev-provider:*") == []
    assert later == [] and shop.deliveries == []


def test_the_fail_drill_leaves_the_pay_page_alone(settings, shop):
    session = open_session()
    settings.DEV_PROVIDER_FAILURE = "fail"
    assert "Payment authorized" in pay_page(session, "pay").content.decode()
    assert len(shop.deliveries) == 1


def test_the_slow_drill_answers_late(settings):
    settings.DEV_PROVIDER_FAILURE, settings.DEV_PROVIDER_DELAY_SECONDS = "slow", 0.3
    started = time.monotonic()
    assert call("voids", VOID).status_code == 200
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize(
    "name, body",
    [
        ("sessions", "{not json"),
        ("sessions", [SESSION]),
        ("sessions", {**SESSION, "order_id": None}),
        ("sessions", {**SESSION, "amount": "2338"}),
        ("sessions", {**SESSION, "amount": 23.38}),
        ("sessions", {**SESSION, "amount": 0}),
        ("sessions", {**SESSION, "currency": "eur"}),
        ("sessions", {**SESSION, "capture": "later"}),
        ("sessions", {**SESSION, "expires_at": "tomorrow"}),
        ("sessions", {**SESSION, "expires_at": "2030-01-01T12:00:00"}),  # no offset: ambiguous
        ("sessions", {key: value for key, value in SESSION.items() if key != "capture"}),
        ("captures", {**CAPTURE, "amount": True}),
        ("captures", {"payment_id": "pay-1"}),
        ("voids", {}),
        ("voids", {"payment_id": ""}),
        ("refunds", {**REFUND, "refund_id": "7"}),
    ],
)
def test_a_bad_body_is_a_400_and_does_nothing(redis, name, body):
    answer = call(name, body if isinstance(body, str) else json.dumps(body))
    assert answer.status_code == 400 and isinstance(answer.json()["error"], str) and answer.json()["error"]
    assert redis.keys("dev-provider:*") == []


@pytest.mark.parametrize(
    "name, body", [("sessions", SESSION), ("captures", CAPTURE), ("voids", VOID), ("refunds", REFUND)]
)
def test_a_call_without_an_idempotency_key_is_a_400(redis, name, body):
    answer = call(name, body, key=None)
    assert answer.status_code == 400 and answer.json() == {"error": "Idempotency-Key is required"}
    assert redis.keys("dev-provider:*") == []


@pytest.mark.parametrize(
    "name, body", [("sessions", SESSION), ("captures", CAPTURE), ("voids", VOID), ("refunds", REFUND)]
)
@pytest.mark.parametrize(
    "authorization", [None, "", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", KEY, f"Token {KEY}", "Bearer ключ"]
)
def test_a_call_without_the_shops_key_is_a_401_and_does_nothing(redis, shop, monkeypatch, name, body, authorization):
    later = acts_after_answering(monkeypatch)
    refused = call(name, body, authorization=authorization)
    assert refused.status_code == 401 and isinstance(refused.json()["error"], str)
    assert redis.keys("dev-provider:*") == [] and later == [] and shop.deliveries == []

    # Nothing kept for its Idempotency-Key: the shop's own call with it acts.
    accepted = call(name, body)
    assert accepted.status_code == 200 and redis.exists("dev-provider:key-1")
    if name == "sessions":
        assert stored_session(redis, accepted.json()) == {**SESSION, "status": "open"}
    if name == "refunds":
        assert later == [("_confirm", (REFUND,))]


def test_an_empty_key_opens_nothing(settings, redis):
    settings.PAYMENT_PROVIDER_KEY = ""
    assert call("sessions", SESSION, authorization="Bearer ").status_code == 401
    assert call("sessions", SESSION, authorization="").status_code == 401
    assert redis.keys("dev-provider:*") == []


def test_pay_form_cannot_change_what_is_paid(shop):
    session = open_session()
    forged = {"action": "pay", "amount": 1, "order_id": 99, "currency": "USD", "capture": "automatic"}
    Client().post(f"/dev/payment-provider/pay/{session['id']}", forged)
    [event] = shop.events()
    assert (event["order_id"], event["amount"], event["currency"], event["status"]) == (42, 2338, "EUR", "authorized")


def test_the_shops_client_sends_its_key(settings, shop):
    settings.PAYMENT_PROVIDER_URL = shop.url  # records whatever it is sent, on any path
    provider_simulator.void(idempotency_key="void-1", payment_id="pay_sim_1")
    [(headers, _)] = shop.deliveries
    assert headers["Authorization"] == f"Bearer {KEY}" and headers["Idempotency-Key"] == "void-1"


def test_twenty_sessions_at_once_from_the_shops_client_all_open(settings, live_server, redis):
    """The simulator in a server of its own, as `make run` starts it (Procfile `provider`):
    20 shoppers paying at once all get their session, and its pay page on that server."""
    settings.PAYMENT_PROVIDER_URL = f"{live_server.url}/dev/payment-provider"
    together = threading.Barrier(20)

    def start(order_id: int) -> dict:
        together.wait()
        return provider_simulator.create_session(
            idempotency_key=f"session-{order_id}", **{**SESSION, "order_id": order_id}
        )

    with ThreadPoolExecutor(20) as pool:
        sessions = list(pool.map(start, range(1, 21)))
    assert len({session["id"] for session in sessions}) == 20
    assert all(session["pay_url"].startswith(f"{live_server.url}/dev/payment-provider/pay/") for session in sessions)
    stored = sorted(stored_session(redis, session)["order_id"] for session in sessions)
    assert stored == list(range(1, 21))
