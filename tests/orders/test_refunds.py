"""A refund's life: submitted to the payment provider by the `payments` consumer
(idempotency key, retries, outages), confirmed by the signed webhook, retried by
staff when it failed; the shopper sees it and is told by email."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from django.core import mail
from django.core.management import call_command
from django.test import Client, RequestFactory

from config import dev_provider
from core.outages import failed_service
from orders.models import Notification, Refund
from orders.provider import ProviderUnavailable
from orders.services import refund_paid_order
from orders.services.refunds import retry_refund, submit_refund
from outbox.consumers import apply_event
from outbox.models import OutboxEvent
from tests.factories import UserFactory, product_with_stock
from tests.helpers import consumer_event, place_pending_order, post_signed, post_webhook, shopper_client, staff_client

pytestmark = pytest.mark.django_db


class Provider:
    """A payment provider on a real socket: records each call (idempotency key, body);
    `unavailable` answers 503 that many times, `refuse` answers 422."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.unavailable = 0
        self.refuse = False
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                provider.calls.append((self.headers["Idempotency-Key"], body))
                status = 503 if provider.unavailable else 422 if provider.refuse else 200
                provider.unavailable = max(0, provider.unavailable - 1)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status": "pending"}' if status == 200 else b'{"error": "no"}')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()  # quick to shut down

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def keys(self) -> list[str]:
        return [key for key, _ in self.calls]


@pytest.fixture
def provider(settings):
    running = Provider()
    settings.PAYMENT_PROVIDER_URL = running.url
    yield running
    running.stop()


@pytest.fixture
def refund(placed_order):
    """A staff refund of the paid placed_order (2,500 EUR cents)."""
    assert post_webhook(Client(), payment_id="pay-1", order_id=placed_order.id, amount=2500).status_code == 200
    return refund_paid_order(order_id=placed_order.id)


def requested_events(refund) -> list:
    return list(OutboxEvent.objects.filter(event_type="RefundRequested", payload__refund_id=refund.id))


def confirm(refund, *, status="succeeded", amount=None, currency="EUR"):
    body = {
        "type": "refund",
        "refund_id": refund.id,
        "payment_id": refund.payment.provider_payment_id,
        "amount": refund.amount if amount is None else amount,
        "currency": currency,
        "status": status,
    }
    return post_signed(Client(), body)


def test_the_payments_consumer_submits_a_refund_once(provider, refund):
    [event] = requested_events(refund)
    as_consumed = consumer_event("RefundRequested", **event.payload)
    assert apply_event(consumer="payments", event=as_consumed) == "processed"
    refund.refresh_from_db()
    assert refund.status == Refund.Status.SUBMITTED and refund.submitted_at
    assert provider.calls == [
        (f"refund-{refund.id}-1", {"refund_id": refund.id, "payment_id": "pay-1", "amount": 2500, "currency": "EUR"})
    ]
    assert apply_event(consumer="payments", event=as_consumed) == "duplicate"
    submit_refund(refund_id=refund.id)  # a redelivery under another event id: submitted already
    assert len(provider.calls) == 1


def test_a_provider_down_is_an_outage_retried_with_the_same_key(provider, refund, settings):
    provider.stop()
    with pytest.raises(ProviderUnavailable) as down:
        submit_refund(refund_id=refund.id)
    assert failed_service(down.value) == "network"  # the consumer waits and retries; never dead-lettered
    refund.refresh_from_db()
    assert refund.status == Refund.Status.REQUESTED

    again = Provider()
    try:
        settings.PAYMENT_PROVIDER_URL = again.url
        again.unavailable = 2  # two 503s: urllib3 retries with backoff
        assert submit_refund(refund_id=refund.id).status == Refund.Status.SUBMITTED
        assert again.keys() == [f"refund-{refund.id}-1"] * 3  # one refund to the provider, asked three times
    finally:
        again.stop()


def test_confirmation_completes_it_once_and_the_shopper_sees_it(provider, refund, placed_order):
    submit_refund(refund_id=refund.id)
    first = confirm(refund)
    assert first.status_code == 200 and first.json() == {"refund_id": refund.id, "outcome": "completed"}
    assert confirm(refund).json()["outcome"] == "redelivered"
    refund.refresh_from_db()
    assert refund.status == Refund.Status.COMPLETED and refund.completed_at
    [completed] = OutboxEvent.objects.filter(event_type="RefundCompleted")
    apply_event(consumer="email", event=consumer_event("RefundCompleted", **completed.payload))
    assert Notification.objects.get(kind=Notification.Kind.REFUND_COMPLETED).order_id == placed_order.id
    assert "is back on your card" in mail.outbox[-1].body
    body = shopper_client(placed_order.customer).get(f"/api/orders/{placed_order.id}").json()
    [shown] = body["refunds"]
    assert body["status"] == "REFUNDED" and shown["status"] == "COMPLETED"
    assert shown["amount"] == 2500 and shown["completed_at"]


def test_an_amount_mismatch_fails_it_flagged_and_staff_retry_with_a_new_key(provider, refund):
    submit_refund(refund_id=refund.id)
    assert confirm(refund, amount=1).json()["outcome"] == "amount_mismatch"
    refund.refresh_from_db()
    assert refund.status == Refund.Status.FAILED and refund.failure_reason.startswith("amount_mismatch")
    assert confirm(refund).json()["outcome"] == "redelivered"  # a failed refund is not completed by a late word

    assert retry_refund(refund_id=refund.id) and not retry_refund(refund_id=refund.id)
    refund.refresh_from_db()
    assert (refund.status, refund.attempt, refund.failure_reason) == (Refund.Status.REQUESTED, 2, "")
    assert [e.payload.get("attempt") for e in requested_events(refund)] == [None, 2]
    submit_refund(refund_id=refund.id)
    assert provider.keys() == [f"refund-{refund.id}-1", f"refund-{refund.id}-2"]


def test_a_failure_or_a_refusal_by_the_provider_fails_it(provider, refund):
    provider.refuse = True
    assert submit_refund(refund_id=refund.id).status == Refund.Status.FAILED
    refund.refresh_from_db()
    assert "refused by the provider" in refund.failure_reason and len(provider.calls) == 1
    retry_refund(refund_id=refund.id)
    provider.refuse = False
    submit_refund(refund_id=refund.id)
    assert confirm(refund, status="failed").json()["outcome"] == "failed"


def test_a_confirmation_for_no_such_refund_changes_nothing(refund):
    stranger = Refund(id=refund.id + 1000, amount=1, currency="EUR")
    stranger.payment = refund.payment
    assert confirm(stranger).json() == {"refund_id": None, "outcome": "unknown_refund"}
    refund.refresh_from_db()
    assert refund.status == Refund.Status.REQUESTED


def test_simulate_payment_confirms_a_refund(refund, capsys):
    call_command("simulate_payment", "--refund", str(refund.id), "--local")
    refund.refresh_from_db()
    assert refund.status == Refund.Status.COMPLETED and '"outcome":"completed"' in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_the_dev_simulator_answers_a_retry_alike_and_confirms_once(live_server, settings, redis, monkeypatch):
    confirmations = []  # every confirmation the simulator starts (a thread of its own)

    class Recorded(threading.Thread):
        def start(self) -> None:
            confirmations.append(self)
            super().start()

    monkeypatch.setattr(dev_provider, "threading", SimpleNamespace(Thread=Recorded))
    product_with_stock(sku="A", price=1250, available=5)
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    post_webhook(Client(), payment_id="pay-sim", order_id=order.id, amount=2500)
    refund = refund_paid_order(order_id=order.id)
    settings.DEV_PROVIDER_WEBHOOK_URL = f"{live_server.url}/api/payments/webhook"
    body = json.dumps({"refund_id": refund.id, "payment_id": "pay-sim", "amount": 2500, "currency": "EUR"})
    call = RequestFactory().post(
        "/dev/payment-provider/refunds",
        body,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=refund.idempotency_key,
        HTTP_AUTHORIZATION=f"Bearer {settings.PAYMENT_PROVIDER_KEY}",
    )
    answers = {dev_provider.refunds(call).content for _ in range(3)}
    assert len(answers) == 1
    assert len(confirmations) == 1  # the retries started none
    for confirmation in confirmations:  # sent, and answered by the webhook
        confirmation.join(10)
        assert not confirmation.is_alive()
    assert Refund.objects.get(id=refund.id).status == Refund.Status.COMPLETED
    assert OutboxEvent.objects.filter(event_type="RefundCompleted").count() == 1


def test_staff_retry_a_failed_refund_from_the_admin(provider, refund):
    provider.refuse = True
    submit_refund(refund_id=refund.id)
    admin = staff_client("Order managers")
    listed = admin.get("/admin/orders/refund/?status__exact=FAILED").content.decode()
    assert "refused by the provider" in listed  # the reason, visible
    response = admin.post("/admin/orders/refund/", {"action": "retry", "_selected_action": [refund.id]})
    assert response.status_code == 302
    refund.refresh_from_db()
    assert (refund.status, refund.attempt) == (Refund.Status.REQUESTED, 2)
    assert (
        staff_client("Stock managers")
        .post("/admin/orders/refund/", {"action": "retry", "_selected_action": [refund.id]})
        .status_code
        == 403
    )  # stock managers only look
