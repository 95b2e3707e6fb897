"""Payments the shop starts: a session per order (one, however many calls), the
provider's webhook authorizing then capturing, the `payments` consumer capturing
when the order ships and voiding when it is cancelled before, a capture racing a
void decided by one conditional update, late authorizations voided."""

import pytest
from django.db import connection
from django.test import Client

from core.outages import failed_service
from orders.exceptions import PaymentProviderUnavailable
from orders.handlers import capture_on_shipment, void_on_cancellation, void_what_paid_no_order
from orders.models import Notification, Order, OrderStatus, Payment, PaymentSession, Refund
from orders.provider import ProviderUnavailable
from orders.services import mark_order_shipped, refund_paid_order
from orders.services.payments import capture_payment, void_payment
from outbox.models import OutboxEvent
from tests.factories import UserFactory, api_token, product_with_stock
from tests.helpers import consumer_event, expire_now, place_pending_order, post_webhook, run_in_threads, shopper_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def shopper_order(redis):
    """A shopper and their pending order of 2 x "A" at 1,250."""
    product_with_stock(sku="A", price=1250, available=10)
    client = shopper_client()
    return client, place_pending_order(redis, client.user, {"A": 2})


def authorize(order, payment_id="pay_1", status="authorized"):
    response = post_webhook(
        Client(), payment_id=payment_id, order_id=order.id, amount=order.total_amount, status=status
    )
    assert response.status_code == 200, response.content
    return Payment.objects.get(provider_payment_id=payment_id)


def events(order, event_type: str) -> list[dict]:
    return [e.payload for e in OutboxEvent.objects.filter(aggregate_id=str(order.id), event_type=event_type)]


# --- the session -----------------------------------------------------------------------------


def test_a_payment_session_for_an_order_awaiting_payment_and_the_same_one_again(provider, shopper_order):
    client, order = shopper_order
    first = client.post(f"/api/orders/{order.id}/payment")
    assert first.status_code == 201, first.content
    body = first.json()
    assert (body["amount"], body["currency"]) == (2500, "EUR")
    assert body["pay_url"].startswith(provider.url) and body["session_id"] == "ps_1"
    order.refresh_from_db()
    again = client.post(f"/api/orders/{order.id}/payment")
    assert again.status_code == 200 and again.json() == body
    [(key, call)] = provider.called("sessions")  # the open session is answered from the database
    assert key == f"session-{order.id}-1" and call["capture"] == "manual" and call["amount"] == 2500
    assert PaymentSession.objects.get().expires_at <= order.expires_at


@pytest.mark.django_db(transaction=True)
def test_20_concurrent_calls_get_one_session(provider, redis):
    product_with_stock(sku="A", price=1250, available=10)
    customer = UserFactory()
    token = f"Token {api_token(customer)}"
    order = place_pending_order(redis, customer, {"A": 1})

    def pay():
        response = Client().post(f"/api/orders/{order.id}/payment", HTTP_AUTHORIZATION=token)
        return response.status_code, response.json()["session_id"]

    answers = run_in_threads([pay] * 20)
    assert {session for _, session in answers} == {"ps_1"}
    assert sorted(status for status, _ in answers).count(201) >= 1
    assert [status for status, _ in answers].count(201) == 1  # one call made the session; 19 found it
    assert PaymentSession.objects.count() == 1 and len(provider.sessions) == 1
    assert {key for key, _ in provider.called("sessions")} == {f"session-{order.id}-1"}
    connection.close()


def test_only_an_order_awaiting_payment_can_be_paid(provider, shopper_order, redis):
    client, order = shopper_order
    other = shopper_client()
    assert other.post(f"/api/orders/{order.id}/payment").status_code == 404  # someone else's
    expire_now(order)
    refused = client.post(f"/api/orders/{order.id}/payment")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "order_not_payable")  # past its deadline
    paid = place_pending_order(redis, client.user, {"A": 1}, key="k-paid")
    authorize(paid, "pay_paid")
    assert client.post(f"/api/orders/{paid.id}/payment").json()["error"]["code"] == "order_not_payable"
    assert provider.calls == []


def test_the_provider_down_is_a_503_and_the_next_call_asks_under_the_same_key(provider, shopper_order):
    client, order = shopper_order
    provider.unavailable = 10  # more than the client's retries
    down = client.post(f"/api/orders/{order.id}/payment")
    assert (down.status_code, down.json()["error"]["code"]) == (503, "payment_provider_unavailable")
    provider.unavailable = 0
    up = client.post(f"/api/orders/{order.id}/payment")
    assert up.status_code == 200 and up.json()["session_id"] == "ps_1"  # the attempt made before, now answered
    assert {key for key, _ in provider.called("sessions")} == {f"session-{order.id}-1"}


# --- authorize, then capture at shipment; void on cancellation ---------------------------------


def test_authorized_then_captured_when_the_order_ships(provider, shopper_order):
    _, order = shopper_order
    payment = authorize(order)
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID and payment.status == Payment.Status.AUTHORIZED
    assert payment.outcome == Payment.Outcome.APPLIED and payment.captured_at is None
    assert events(order, "PaymentAuthorized")[0]["applied"] is True

    mark_order_shipped(order_id=order.id)
    [shipped] = events(order, "OrderShipped")
    capture_on_shipment(consumer_event("OrderShipped", **shipped))
    capture_on_shipment(consumer_event("OrderShipped", **shipped))  # redelivered: nothing more

    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURED and payment.captured_at is not None
    assert provider.called("captures") == [
        (f"capture-{payment.id}", {"payment_id": "pay_1", "amount": 2500, "currency": "EUR"})
    ]
    [captured] = events(order, "PaymentCaptured")
    from orders.handlers import send_payment_receipt

    send_payment_receipt(consumer_event("PaymentCaptured", **captured))
    assert Notification.objects.filter(order=order, kind=Notification.Kind.PAYMENT_RECEIPT).count() == 1


def test_a_paid_order_cancelled_before_shipping_is_voided_not_refunded(provider, shopper_order):
    client, order = shopper_order
    payment = authorize(order)
    cancelled = client.post(f"/api/orders/{order.id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == OrderStatus.CANCELLED
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDING  # claimed in the cancellation's transaction
    [event] = events(order, "OrderCancelled")
    assert event["was_paid"] is True
    void_on_cancellation(consumer_event("OrderCancelled", **event))
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDED and payment.voided_at is not None
    assert [key for key, _ in provider.called("voids")] == [f"void-{payment.id}"]
    assert not Refund.objects.exists() and not provider.called("captures")
    assert len(events(order, "PaymentVoided")) == 1
    from inventory.models import Stock

    assert Stock.objects.filter(product_id="A").values_list("available", "reserved").get() == (10, 0)


def test_a_captured_payment_keeps_its_order_from_being_cancelled(provider, shopper_order):
    client, order = shopper_order
    authorize(order, status="succeeded")  # authorized and captured at once
    refused = client.post(f"/api/orders/{order.id}/cancel")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "order_not_cancellable")


def test_an_authorized_order_is_cancelled_not_refunded_by_staff(provider, shopper_order):
    from orders.exceptions import OrderNotRefundable

    _, order = shopper_order
    authorize(order)
    with pytest.raises(OrderNotRefundable):
        refund_paid_order(order_id=order.id)
    assert Order.objects.get(pk=order.pk).status == OrderStatus.PAID


@pytest.mark.django_db(transaction=True)
def test_a_capture_racing_a_void_has_one_winner_50_times(provider, redis):
    product_with_stock(sku="A", price=100, available=100)
    customer = UserFactory()
    for round_ in range(50):
        order = place_pending_order(redis, customer, {"A": 1}, key=f"race-{round_}")
        payment = authorize(order, f"pay_race_{round_}")
        outcomes = run_in_threads(
            [lambda p=payment: capture_payment(payment=p), lambda p=payment: void_payment(payment=p)]
        )
        payment.refresh_from_db()
        assert sorted(outcomes) == [False, True], outcomes
        captured = outcomes[0]
        assert payment.status == (Payment.Status.CAPTURED if captured else Payment.Status.VOIDED)
        keys = [key for key, _ in provider.called("captures" if captured else "voids")]
        assert keys[-1] == f"{'capture' if captured else 'void'}-{payment.id}"
        loser = "voids" if captured else "captures"
        assert not any(key.endswith(f"-{payment.id}") for key, _ in provider.called(loser))
        Order.objects.filter(pk=order.pk).update(status=OrderStatus.SHIPPED)  # out of the pending-slot count
    assert len(provider.called("captures")) + len(provider.called("voids")) == 50
    connection.close()


def test_the_provider_down_during_capture_keeps_the_order_unshipped_and_captures_once_when_back(
    provider, shopper_order
):
    _, order = shopper_order
    payment = authorize(order)
    provider.unavailable = 100
    with pytest.raises(PaymentProviderUnavailable):
        mark_order_shipped(order_id=order.id)
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID and not events(order, "OrderShipped")
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURING  # claimed; the provider not yet answered
    provider.unavailable = 0
    mark_order_shipped(order_id=order.id)
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURED and len(events(order, "PaymentCaptured")) == 1
    assert Order.objects.get(id=order.id).status == OrderStatus.SHIPPED
    assert {key for key, _ in provider.called("captures")} == {f"capture-{payment.id}"}  # one capture, retried


def test_an_order_shipped_before_capture_came_first_still_has_its_money_taken_by_the_consumer(provider, shopper_order):
    """OrderShipped of an order shipped uncaptured (before shipping captured first):
    the `payments` consumer takes the money, and retries an outage, never dead-letters it."""
    _, order = shopper_order
    payment = authorize(order)
    Order.objects.filter(id=order.id).update(status=OrderStatus.SHIPPED)
    provider.unavailable = 100
    with pytest.raises(ProviderUnavailable) as raised:
        capture_on_shipment(consumer_event("OrderShipped", order_id=order.id))
    assert failed_service(raised.value) == "network"
    provider.unavailable = 0
    capture_on_shipment(consumer_event("OrderShipped", order_id=order.id))
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURED and len(events(order, "PaymentCaptured")) == 1
    assert {key for key, _ in provider.called("captures")} == {f"capture-{payment.id}"}  # one capture, retried


def test_a_late_authorization_after_the_expiry_is_voided(provider, shopper_order):
    from orders.services import expire_unpaid_orders

    _, order = shopper_order
    expire_now(order)
    assert expire_unpaid_orders() == 1
    payment = authorize(order, "pay_late")
    assert (payment.status, payment.outcome) == (Payment.Status.AUTHORIZED, Payment.Outcome.VOIDED)
    [authorized] = events(order, "PaymentAuthorized")
    assert authorized["applied"] is False and authorized["reason"] == "order_not_pending"
    void_what_paid_no_order(consumer_event("PaymentAuthorized", **authorized))
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDED and not Refund.objects.exists()
    assert Order.objects.get(pk=order.pk).status == OrderStatus.CANCELLED


# --- the webhook: twice, out of order, immediate capture -------------------------------------


def test_a_capture_told_before_its_authorization_is_applied_once_in_order(provider, shopper_order):
    _, order = shopper_order
    captured = authorize(order, "pay_ooo", status="captured")
    late = post_webhook(Client(), payment_id="pay_ooo", order_id=order.id, amount=2500, status="authorized")
    assert late.json()["redelivered"] is True
    captured.refresh_from_db()
    assert captured.status == Payment.Status.CAPTURED and captured.outcome == Payment.Outcome.APPLIED
    assert Order.objects.get(pk=order.pk).status == OrderStatus.PAID
    assert [len(events(order, kind)) for kind in ("OrderPaid", "PaymentAuthorized", "PaymentCaptured")] == [1, 1, 1]


def test_immediate_capture_the_providers_capture_moves_the_payment(provider, shopper_order, settings):
    settings.PAYMENT_CAPTURE = "immediate"
    client, order = shopper_order
    assert client.post(f"/api/orders/{order.id}/payment").status_code == 201
    assert provider.called("sessions")[0][1]["capture"] == "automatic"
    payment = authorize(order, "pay_now")
    again = authorize(order, "pay_now", status="captured")  # the provider captured on its own
    assert again.status == Payment.Status.CAPTURED and payment.id == again.id
    assert len(events(order, "PaymentCaptured")) == 1
    mark_order_shipped(order_id=order.id)
    capture_on_shipment(consumer_event("OrderShipped", order_id=order.id))
    assert provider.called("captures") == []  # nothing left to capture


def test_without_a_provider_configured_a_payment_is_a_503_not_a_500(shopper_order, settings):
    settings.PAYMENT_PROVIDER_URL = ""
    client, order = shopper_order
    answer = client.post(f"/api/orders/{order.id}/payment")
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "payment_provider_unavailable")


def test_a_second_authorization_for_a_paid_order_is_voided_and_never_captured(provider, shopper_order):
    _, order = shopper_order
    paying = authorize(order, "pay_first")
    second = authorize(order, "pay_second")  # the shopper paid twice (two tabs)
    assert (second.status, second.outcome) == (Payment.Status.AUTHORIZED, Payment.Outcome.VOIDED)
    mark_order_shipped(order_id=order.id)
    capture_on_shipment(consumer_event("OrderShipped", order_id=order.id))
    [(key, body)] = provider.called("captures")
    assert (key, body["payment_id"]) == (f"capture-{paying.id}", "pay_first")  # the one that paid the order
    late = [e for e in events(order, "PaymentAuthorized") if e["payment_id"] == "pay_second"]
    void_what_paid_no_order(consumer_event("PaymentAuthorized", **late[0]))
    second.refresh_from_db()
    assert second.status == Payment.Status.VOIDED


@pytest.mark.django_db(transaction=True)
@pytest.mark.kafka
@pytest.mark.usefixtures("queue_topic")
def test_a_queued_order_not_yet_written_cannot_be_paid(provider, redis):
    from tests.orders.conftest import SKU, queue_sale, shopper_with_cart

    queue_sale(5)
    client = shopper_with_cart(redis, {SKU: 1})
    queued = client.post("/api/orders", HTTP_IDEMPOTENCY_KEY="q-pay")
    assert queued.status_code == 202
    refused = client.post(f"/api/orders/{queued.json()['id']}/payment")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "order_not_payable")
    assert refused.json()["error"]["details"]["status"] == "QUEUED" and provider.calls == []
    connection.close()


def test_an_authorization_for_another_amount_pays_nothing_and_is_voided(provider, shopper_order):
    _, order = shopper_order
    answer = post_webhook(Client(), payment_id="pay_short", order_id=order.id, amount=100, status="authorized")
    assert answer.status_code == 200 and answer.json()["outcome"] == "voided"
    assert Order.objects.get(pk=order.pk).status == OrderStatus.PENDING_PAYMENT
    [authorized] = events(order, "PaymentAuthorized")
    assert (authorized["applied"], authorized["reason"]) == (False, "amount_mismatch")
    void_what_paid_no_order(consumer_event("PaymentAuthorized", **authorized))
    assert Payment.objects.get(provider_payment_id="pay_short").status == Payment.Status.VOIDED
    assert not Refund.objects.exists()


def test_a_paid_order_cancelled_gives_back_its_loyalty_points_once(provider, shopper_order):
    from shop.handlers import award_points, reverse_points_of_a_cancelled_paid_order
    from shop.models import LoyaltyEntry

    client, order = shopper_order
    authorize(order)
    [paid] = events(order, "OrderPaid")
    award_points(consumer_event("OrderPaid", **paid))
    assert client.post(f"/api/orders/{order.id}/cancel").status_code == 200
    [cancelled] = events(order, "OrderCancelled")
    for _ in range(2):  # redelivered: once
        reverse_points_of_a_cancelled_paid_order(consumer_event("OrderCancelled", **cancelled))
    assert sorted(LoyaltyEntry.objects.filter(order_id=order.id).values_list("points", flat=True)) == [-25, 25]


def test_with_immediate_capture_a_paid_order_is_not_cancelled(provider, shopper_order, settings):
    settings.PAYMENT_CAPTURE = "immediate"
    client, order = shopper_order
    payment = authorize(order)  # the provider captures it in a moment: refunded if anything, never voided
    refused = client.post(f"/api/orders/{order.id}/cancel")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "order_not_cancellable")
    assert Payment.objects.get(pk=payment.pk).status == Payment.Status.AUTHORIZED


def test_after_a_decline_the_next_call_opens_a_new_session(provider, shopper_order):
    client, order = shopper_order
    first = client.post(f"/api/orders/{order.id}/payment").json()
    authorize(order, "pay_declined", status="failed")  # the shopper declined on the provider's page
    second = client.post(f"/api/orders/{order.id}/payment")
    assert second.status_code == 201 and second.json()["session_id"] != first["session_id"]
    assert [key for key, _ in provider.called("sessions")] == [f"session-{order.id}-1", f"session-{order.id}-2"]


def test_a_free_order_is_paid_without_the_provider(provider, redis):
    from tests.factories import VoucherFactory
    from tests.orders.test_vouchers import fill_with_voucher

    product_with_stock(sku="A", price=1000, available=5)
    VoucherFactory(code="ALL", value=100)  # 100% off
    client = shopper_client()
    fill_with_voucher(redis, client.user.id, {"A": 1}, "ALL")
    order = client.post("/api/orders", HTTP_IDEMPOTENCY_KEY="free").json()
    assert order["total"] == 0
    answer = client.post(f"/api/orders/{order['id']}/payment")
    assert (answer.status_code, answer.json()["error"]["code"]) == (409, "order_not_payable")
    assert Order.objects.get(pk=order["id"]).status == OrderStatus.PAID and provider.calls == []
    assert Payment.objects.get(order_id=order["id"]).amount == 0


def test_a_failed_payment_then_a_success_under_the_same_id_pays_the_order(provider, shopper_order):
    _, order = shopper_order
    authorize(order, "pay_retry", status="failed")
    payment = authorize(order, "pay_retry")  # the provider kept its id across the retry
    assert (payment.status, payment.outcome) == (Payment.Status.AUTHORIZED, Payment.Outcome.APPLIED)
    assert payment.authorized_at is not None
    assert Order.objects.get(pk=order.pk).status == OrderStatus.PAID


def test_a_capture_the_provider_refuses_releases_the_claim(provider, shopper_order, monkeypatch):
    from orders import provider as client_module

    _, order = shopper_order
    payment = authorize(order)

    def refuse(**kwargs):
        raise client_module.ProviderRefused("payment provider answered 422: authorization expired")

    monkeypatch.setattr(client_module, "capture", refuse)
    with pytest.raises(client_module.ProviderRefused):
        capture_payment(payment=payment)
    payment.refresh_from_db()
    assert payment.status == Payment.Status.AUTHORIZED  # not stuck in CAPTURING: it can still be voided
    assert void_payment(payment=payment) is True


def test_a_providers_capture_after_a_void_was_claimed_is_refunded(provider, shopper_order):
    client, order = shopper_order
    payment = authorize(order)
    assert client.post(f"/api/orders/{order.id}/cancel").status_code == 200  # claims the void
    authorize(order, status="captured")  # the provider captured first after all
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDING
    assert Refund.objects.get(payment=payment).amount == 2500  # the money taken goes back
