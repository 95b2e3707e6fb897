"""The Stripe adapter (orders/provider_stripe.py) and its webhook
(orders/services/stripe_events.py) against a local server that speaks Stripe's
API (tests/stripe_server.py), through the official `stripe` library: a
payment's whole life, each call with its idempotency key, the events signed as
Stripe signs them, and Stripe's refusals and outages."""

import json
import time

import pytest
from django.core import mail
from django.test import Client

from orders.handlers import submit_requested_refund
from orders.models import Order, OrderStatus, Payment, Refund
from orders.services import cancel_pending_order, mark_order_shipped, refund_goodwill, remove_order_lines
from orders.services.payments import void_payment
from orders.services.refunds import retry_refund, submit_refund
from shop.handlers import award_points, reverse_points_of_a_cancelled_paid_order
from shop.models import LoyaltyEntry
from tests.factories import product_with_stock
from tests.helpers import consumer_event, place_pending_order, shopper_client
from tests.orders.test_admin_payments import act, said
from tests.orders.test_payment_lifecycle import events
from tests.stripe_server import StripeServer

pytestmark = pytest.mark.django_db

WEBHOOK = "/api/payments/stripe/webhook"


@pytest.fixture
def stripe_api(settings):
    server = StripeServer()
    settings.PAYMENT_PROVIDER = "stripe"
    key, whsec = server.api_key, server.webhook_secret  # the server's own (refused with DEBUG off)
    settings.STRIPE_SECRET_KEY = key
    settings.STRIPE_WEBHOOK_SECRET = whsec
    settings.STRIPE_API_BASE = server.url
    yield server
    server.stop()


@pytest.fixture
def shopper_order(redis):
    """A shopper and their pending order of 2 x "A" at 1,250 and 1 x "B" at 500."""
    product_with_stock(sku="A", price=1250, available=10)
    product_with_stock(sku="B", price=500, available=10)
    client = shopper_client()
    return client, place_pending_order(redis, client.user, {"A": 2, "B": 1})


def post_event(stripe_api, event, *, body: bytes | None = None, header: str | None = None):
    signed_body, signature = stripe_api.signed(event)
    return Client().post(
        WEBHOOK, body or signed_body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header or signature
    )


def deliver(stripe_api, events_: list[dict]) -> list[str]:
    """Stripe's events to the shop's webhook, in order: each one's outcome."""
    outcomes = []
    for event in events_:
        response = post_event(stripe_api, event)
        assert response.status_code == 200, response.content
        outcomes.append(response.json()["outcome"])
    return outcomes


def open_session(client, order, stripe_api) -> str:
    response = client.post(f"/api/orders/{order.id}/payment")
    assert response.status_code in (200, 201), response.content  # 200: the attempt's row was made before
    session_id = response.json()["session_id"]
    assert response.json()["pay_url"] == stripe_api.sessions[session_id]["url"]
    return session_id


def paid(client, order, stripe_api) -> Payment:
    session_id = open_session(client, order, stripe_api)
    assert deliver(stripe_api, stripe_api.pay(session_id)) == ["applied", "redelivered"]
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    return Payment.objects.get(order=order)


def keys(stripe_api, path: str) -> list[str]:
    """The idempotency keys sent, without this shop's name before them (STRIPE_INSTANCE)."""
    sent = [call.idempotency_key for call in stripe_api.called("POST", path)]
    assert all(key.startswith("shop:") for key in sent), sent
    return [key.removeprefix("shop:") for key in sent]


# --- a payment's life ---------------------------------------------------------------------------


def test_pay_then_ship_captures_before_the_goods_leave(stripe_api, shopper_order):
    client, order = shopper_order
    session_id = open_session(client, order, stripe_api)
    [created] = stripe_api.called("POST", "/v1/checkout/sessions")
    assert keys(stripe_api, "/v1/checkout/sessions") == [f"session-{order.id}-1"]
    params = created.params
    assert params["mode"] == "payment" and params["payment_method_types"] == ["card"]
    ours = {"shop": "shop", "order_id": str(order.id)}
    assert params["payment_intent_data"] == {"capture_method": "manual", "metadata": ours}
    assert params["metadata"] == ours
    assert params["line_items"][0]["price_data"]["unit_amount"] == "3000"
    assert params["line_items"][0]["price_data"]["currency"] == "eur"
    assert int(params["expires_at"]) >= time.time() + 30 * 60  # Stripe's shortest session

    payment = paid(client, order, stripe_api)
    assert payment.provider_payment_id == stripe_api.sessions[session_id]["payment_intent"]
    assert (payment.status, payment.amount, payment.currency) == (Payment.Status.AUTHORIZED, 3000, "EUR")
    assert payment.authorization_ends_at is not None

    mark_order_shipped(order_id=order.id)
    [capture] = stripe_api.called("POST", f"/v1/payment_intents/{payment.provider_payment_id}/capture")
    assert (capture.idempotency_key, capture.params) == (f"shop:capture-{payment.id}", {"amount_to_capture": "3000"})
    payment.refresh_from_db()
    assert (payment.status, payment.captured_amount) == (Payment.Status.CAPTURED, 3000)
    assert Order.objects.get(id=order.id).status == OrderStatus.SHIPPED
    # Stripe's word on the capture the shop made: nothing more happens.
    assert deliver(stripe_api, [e for e in stripe_api.events if e["type"] == "payment_intent.succeeded"]) == [
        "redelivered"
    ]
    assert len(events(order, "PaymentCaptured")) == 1


def test_pay_then_cancel_voids_and_stripes_word_on_it_changes_nothing(stripe_api, shopper_order):
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    assert cancel_pending_order(order_id=order.id)
    void_payment(payment=Payment.objects.get(id=payment.id))
    [cancel] = stripe_api.called("POST", f"/v1/payment_intents/{payment.provider_payment_id}/cancel")
    assert cancel.idempotency_key == f"shop:void-{payment.id}"
    assert deliver(stripe_api, stripe_api.events[-1:]) == ["redelivered"]  # payment_intent.canceled
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDED
    assert Order.objects.get(id=order.id).status == OrderStatus.CANCELLED


def test_lines_removed_before_shipping_are_not_captured(stripe_api, shopper_order):
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    remove_order_lines(order_id=order.id, lines={"B": 1})
    mark_order_shipped(order_id=order.id)
    [capture] = stripe_api.called("POST", f"/v1/payment_intents/{payment.provider_payment_id}/capture")
    assert capture.params == {"amount_to_capture": "2500"}
    intent = stripe_api.payment_intents[payment.provider_payment_id]
    assert (intent["amount_received"], intent["amount_capturable"]) == (2500, 0)  # the rest released
    payment.refresh_from_db()
    assert (payment.captured_amount, payment.amount) == (2500, 3000)


def test_a_refund_is_asked_once_and_confirmed_by_stripes_events(stripe_api, shopper_order):
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    mark_order_shipped(order_id=order.id)
    refund = refund_goodwill(order_id=order.id, amount=700, note="late delivery")
    [requested] = events(order, "RefundRequested")
    submit_requested_refund(consumer_event("RefundRequested", **requested))
    submit_requested_refund(consumer_event("RefundRequested", **requested))  # redelivered: not asked again
    [asked] = stripe_api.called("POST", "/v1/refunds")
    assert asked.idempotency_key == f"shop:refund-{refund.id}-1"
    assert asked.params == {
        "payment_intent": payment.provider_payment_id,
        "amount": "700",
        "metadata": {"shop": "shop", "refund_id": str(refund.id), "refund_key": f"refund-{refund.id}-1"},
    }
    told = [e for e in stripe_api.events if e["type"] in ("refund.created", "charge.refunded")]
    assert [e["type"] for e in told] == ["refund.created", "charge.refunded"]
    assert deliver(stripe_api, told) == ["completed", "redelivered"]
    # charge.refunded carries no refunds any more: the shop listed the charge's.
    assert stripe_api.called("GET", "/v1/refunds")
    refund.refresh_from_db()
    assert refund.status == Refund.Status.COMPLETED


def test_a_decline_then_a_success_on_the_same_page_pays_the_order_once(stripe_api, shopper_order):
    client, order = shopper_order
    session_id = open_session(client, order, stripe_api)
    assert deliver(stripe_api, stripe_api.decline(session_id)) == ["failed"]
    assert Order.objects.get(id=order.id).status == OrderStatus.PENDING_PAYMENT
    assert deliver(stripe_api, stripe_api.pay(session_id)) == ["applied", "redelivered"]
    [payment] = Payment.objects.filter(order=order)
    assert (payment.status, payment.outcome) == (Payment.Status.AUTHORIZED, Payment.Outcome.APPLIED)
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID


def test_an_automatic_capture_pays_and_captures_at_once(stripe_api, shopper_order, settings):
    settings.PAYMENT_CAPTURE = "immediate"
    client, order = shopper_order
    session_id = open_session(client, order, stripe_api)
    [created] = stripe_api.called("POST", "/v1/checkout/sessions")
    assert created.params["payment_intent_data"]["capture_method"] == "automatic"
    assert deliver(stripe_api, stripe_api.pay(session_id)) == ["applied", "redelivered"]
    payment = Payment.objects.get(order=order)
    assert (payment.status, payment.captured_amount) == (Payment.Status.CAPTURED, 3000)


def test_an_event_of_ours_for_an_unknown_order_is_voided_as_the_simulators(stripe_api, shopper_order):
    client, order = shopper_order
    session_id = open_session(client, order, stripe_api)
    stripe_api._intent_data[session_id]["metadata"]["order_id"] = "99999999"  # an order since deleted
    stripe_api.sessions[session_id]["metadata"]["order_id"] = "99999999"
    assert deliver(stripe_api, stripe_api.pay(session_id)) == ["voided", "redelivered"]
    assert Payment.objects.get().order is None


def test_a_payment_that_is_not_this_shops_is_ignored_never_voided_nor_refunded(stripe_api, shopper_order, settings):
    """Another shop, a staging copy or a payment link on the same Stripe account:
    its events reach this endpoint, and are none of this shop's business."""
    client, order = shopper_order
    session_id = open_session(client, order, stripe_api)
    settings.STRIPE_INSTANCE = "staging"
    assert deliver(stripe_api, stripe_api.pay(session_id)) == ["ignored", "ignored"]
    intent = stripe_api.sessions[session_id]["payment_intent"]
    stripe_api.payment_intents[intent]["metadata"] = {}  # a payment link's: no metadata of ours at all
    succeeded = stripe_api.event(
        "payment_intent.succeeded", {**stripe_api.payment_intents[intent], "status": "succeeded"}
    )
    assert deliver(stripe_api, [succeeded]) == ["ignored"]
    assert not Payment.objects.exists() and not Refund.objects.exists()
    assert not stripe_api.called("POST", f"/v1/payment_intents/{intent}/cancel")


# --- the webhook's signature and body -----------------------------------------------------------


def test_the_signature_refuses_a_wrong_secret_an_old_timestamp_a_changed_body_and_none(stripe_api, shopper_order):
    client, order = shopper_order
    [completed, _] = stripe_api.pay(open_session(client, order, stripe_api))
    body, good = stripe_api.signed(completed)
    refused = {
        "wrong secret": (body, stripe_api.signature(body, secret="whsec_someone_else")),
        "old": (body, stripe_api.signature(body, timestamp=int(time.time()) - 301)),
        "changed body": (body.replace(b'"amount_total": 3000', b'"amount_total": 1'), good),
        "no header": (body, ""),
        "not utf-8": (b"\xff" + body, stripe_api.signature(b"\xff" + body)),
    }
    for name, (sent, header) in refused.items():
        response = Client().post(WEBHOOK, sent, content_type="application/json", HTTP_STRIPE_SIGNATURE=header)
        assert response.status_code == 401, name
        assert response.json()["error"]["code"] == "invalid_signature", name
    assert not Payment.objects.exists()
    assert post_event(stripe_api, completed).status_code == 200  # the same event, signed right


def test_a_signed_body_that_is_no_event_is_a_400_and_an_unknown_type_is_ignored(stripe_api):
    for body in (b"[1, 2]", b"not json", b'{"type": "x"}'):
        header = stripe_api.signature(body)
        response = Client().post(WEBHOOK, body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header)
        assert response.status_code == 400, body
    event = stripe_api.event("customer.created", {"id": "cus_1", "object": "customer"})
    response = post_event(stripe_api, event)
    assert (response.status_code, response.json()) == (200, {"received": True, "outcome": "ignored"})


def test_the_stripe_webhook_refuses_everything_while_stripe_is_not_configured(stripe_api, settings):
    settings.STRIPE_WEBHOOK_SECRET = ""
    event = stripe_api.event("customer.created", {"id": "cus_1", "object": "customer"})
    assert post_event(stripe_api, event).status_code == 401


# --- Stripe's refusals and outages ---------------------------------------------------------------


def test_5xx_answers_are_retried_under_the_same_key_and_the_session_made_once(stripe_api, shopper_order):
    client, order = shopper_order
    stripe_api.fail_next(2, status=500)
    open_session(client, order, stripe_api)
    assert keys(stripe_api, "/v1/checkout/sessions") == [f"session-{order.id}-1"] * 3
    assert len(stripe_api.sessions) == 1


def test_a_rate_limit_is_a_503_to_the_shopper_and_the_retry_gets_the_same_session(stripe_api, shopper_order, settings):
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    client, order = shopper_order
    stripe_api.fail_next(1, status=429)
    refused = client.post(f"/api/orders/{order.id}/payment")
    assert (refused.status_code, refused.json()["error"]["code"]) == (503, "payment_provider_unavailable")
    open_session(client, order, stripe_api)
    assert keys(stripe_api, "/v1/checkout/sessions") == [f"session-{order.id}-1"] * 2


def test_stripe_down_at_shipping_keeps_the_order_waiting_and_captures_once_when_back(
    stripe_api, shopper_order, order_manager, settings
):
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    stripe_api.fail_next(1, status=503)
    waiting = act(order_manager, "mark_shipped", order)
    [(level, message)] = said(waiting)
    assert level == "error" and "payment provider is unavailable" in message
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    stripe_api.fail_next(1, status=429)
    act(order_manager, "mark_shipped", order)
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    shipped = act(order_manager, "mark_shipped", order)
    assert said(shipped) == [("success", f"Order {order.id}: shipped.")]
    assert (
        keys(stripe_api, f"/v1/payment_intents/{payment.provider_payment_id}/capture") == [f"capture-{payment.id}"] * 3
    )
    assert stripe_api.payment_intents[payment.provider_payment_id]["amount_received"] == 3000  # one capture


def test_a_card_decline_code_reaches_staff_when_stripe_refuses_a_capture(stripe_api, shopper_order, order_manager):
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    stripe_api.payment_intents[payment.provider_payment_id]["amount_capturable"] = 100  # less held than asked
    refused = act(order_manager, "mark_shipped", order)
    [(level, message)] = said(refused)
    assert level == "error" and "refused the capture" in message
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    payment.refresh_from_db()
    assert payment.status == Payment.Status.AUTHORIZED  # the claim released
    [why] = events(order, "PaymentCaptureRefused")
    assert "amount_too_large" in why["reason"]
    page = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert "PaymentCaptureRefused" in page and "amount_too_large" in page


# --- authorizations that lapse ---------------------------------------------------------------------


def test_a_lapsed_authorization_refuses_the_shipment_and_staff_see_why(stripe_api, shopper_order, order_manager):
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    stripe_api.lapse(payment.provider_payment_id)  # its event not delivered yet
    refused = act(order_manager, "mark_shipped", order)
    [(level, message)] = said(refused)
    assert level == "error" and "authorization lapsed" in message
    assert Order.objects.get(id=order.id).status == OrderStatus.PAYMENT_LAPSED
    payment.refresh_from_db()
    assert (payment.status, payment.outcome) == (Payment.Status.LAPSED, Payment.Outcome.LAPSED)
    [lapsed] = events(order, "OrderPaymentLapsed")
    assert lapsed["payment_id"] == payment.provider_payment_id
    assert not events(order, "OrderShipped")
    assert deliver(stripe_api, stripe_api.events[-1:]) == ["redelivered"]  # Stripe's word, late
    page = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert "Payment lapsed" in page and "OrderPaymentLapsed" in page


def test_stripes_notice_of_a_lapse_moves_the_order_and_staff_ask_the_shopper_to_pay_again(
    stripe_api, shopper_order, order_manager
):
    client, order = shopper_order
    first = paid(client, order, stripe_api)
    assert deliver(stripe_api, stripe_api.lapse(first.provider_payment_id)) == ["lapsed"]
    assert Order.objects.get(id=order.id).status == OrderStatus.PAYMENT_LAPSED

    asked = act(order_manager, "request_payment", order)
    assert said(asked) == [("success", f"Order {order.id}: awaiting payment again, the shopper is e-mailed.")]
    order.refresh_from_db()
    assert (order.status, order.holds_units) == (OrderStatus.PENDING_PAYMENT, False)  # its holds were given back
    [requested] = events(order, "OrderPaymentRequested")
    mail.outbox.clear()
    from orders.handlers import send_payment_request

    send_payment_request(consumer_event("OrderPaymentRequested", **requested))
    [notice] = mail.outbox
    assert notice.subject == f"Please pay again for order {order.id}"

    again = client.post(f"/api/orders/{order.id}/payment")
    assert again.status_code == 201, again.content  # a new attempt: the first session was used
    second = again.json()["session_id"]
    assert stripe_api.sessions[second]["payment_intent"] is None
    assert deliver(stripe_api, stripe_api.pay(second)) == ["applied", "redelivered"]
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    assert Payment.objects.filter(order=order, outcome=Payment.Outcome.APPLIED).count() == 1


def test_staff_cancel_a_lapsed_order_and_its_stock_goes_back(stripe_api, shopper_order, order_manager):
    from inventory.models import Stock

    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    deliver(stripe_api, stripe_api.lapse(payment.provider_payment_id))
    cancelled = act(order_manager, "cancel_pending", order)
    assert said(cancelled) == [("success", f"Order {order.id}: cancelled, stock returned.")]
    assert Order.objects.get(id=order.id).status == OrderStatus.CANCELLED
    # The points its first payment earned go back with it.
    award_points(consumer_event("OrderPaid", **events(order, "OrderPaid")[0]))
    reverse_points_of_a_cancelled_paid_order(consumer_event("OrderCancelled", **events(order, "OrderCancelled")[0]))
    assert sum(LoyaltyEntry.objects.filter(order_id=order.id).values_list("points", flat=True)) == 0
    assert Stock.objects.get(product_id="A").reserved == 0
    assert not stripe_api.called("POST", f"/v1/payment_intents/{payment.provider_payment_id}/cancel")


def test_the_shipment_is_refused_once_its_payment_lapsed_whatever_the_provider(stripe_api, shopper_order):
    from orders.exceptions import OrderNotShippable

    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    deliver(stripe_api, stripe_api.lapse(payment.provider_payment_id))
    with pytest.raises(OrderNotShippable):
        mark_order_shipped(order_id=order.id)
    assert not stripe_api.called("POST", f"/v1/payment_intents/{payment.provider_payment_id}/capture")


def test_an_event_body_is_kept_as_received(stripe_api, shopper_order):
    client, order = shopper_order
    payment = paid(client, order, stripe_api)
    assert json.loads(payment.raw_body)["type"] == "checkout.session.completed"


def test_a_failed_attempts_late_word_is_not_taken_for_its_retrys(stripe_api, shopper_order, settings):
    """Attempt 1 of a refund fails and staff retry: Stripe's events of attempt 1,
    redelivered or listed with the charge, neither fail attempt 2 nor let its
    success be taken for a redelivery (which would invite a second refund)."""
    client, order = shopper_order
    paid(client, order, stripe_api)
    mark_order_shipped(order_id=order.id)
    stripe_api.refund_status = "pending"
    refund = refund_goodwill(order_id=order.id, amount=700, note="late delivery")
    submit_refund(refund_id=refund.id)
    [first] = stripe_api.refunds
    failed = stripe_api.refund_fails(first)
    assert deliver(stripe_api, failed[:1]) == ["failed"]
    assert retry_refund(refund_id=refund.id)
    submit_refund(refund_id=refund.id)
    [second] = [each for each in stripe_api.refunds if each != first]
    assert deliver(stripe_api, failed) == ["stale_attempt", "stale_attempt"]  # attempt 1's, again
    assert Refund.objects.get(id=refund.id).status == Refund.Status.SUBMITTED
    assert deliver(stripe_api, stripe_api.refund_succeeds(second)) == ["completed"]
    refund.refresh_from_db()
    assert (refund.status, refund.attempt) == (Refund.Status.COMPLETED, 2)
    assert Payment.objects.get(order=order).refunded_amount == 700


def test_a_field_of_the_wrong_type_is_a_400_and_a_non_ascii_signature_a_401(stripe_api, shopper_order):
    client, order = shopper_order
    [completed, authorized] = stripe_api.pay(open_session(client, order, stripe_api))
    odd = [
        {**completed, "data": {"object": {**completed["data"]["object"], "amount_total": "3000"}}},
        {**completed, "data": {"object": {**completed["data"]["object"], "currency": 978}}},
        {**completed, "data": {"object": {**completed["data"]["object"], "payment_intent": ["pi_1"]}}},
        {**authorized, "data": {"object": {**authorized["data"]["object"], "amount": 10**20}}},
        {**completed, "data": {"object": "a string"}},
        {**completed, "data": []},
    ]
    for event in odd:
        response = post_event(stripe_api, event)
        assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_webhook_body"), event
    body, _ = stripe_api.signed(completed)
    header = f"t={int(time.time())},v1=é"
    response = Client().post(WEBHOOK, body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header)
    assert response.status_code == 401
    assert not Payment.objects.exists()


def test_the_hold_ends_counted_from_when_stripe_authorized_not_from_a_late_delivery(stripe_api, shopper_order):
    client, order = shopper_order
    [completed, authorized] = stripe_api.pay(open_session(client, order, stripe_api))
    three_days_ago = int(time.time()) - 3 * 86400
    assert deliver(stripe_api, [{**completed, "created": three_days_ago}]) == ["applied"]
    payment = Payment.objects.get(order=order)
    assert payment.authorized_at.timestamp() == three_days_ago
    assert payment.authorization_ends_at.timestamp() == three_days_ago + 7 * 86400


def test_with_stripe_on_the_simulators_webhook_accepts_nothing(stripe_api, shopper_order, settings):
    """PAYMENT_PROVIDER=stripe leaves PAYMENT_WEBHOOK_SECRET unset: a body signed with
    an empty key (anyone can compute it) must not pay an order."""
    from tests.helpers import post_webhook

    settings.PAYMENT_WEBHOOK_SECRET = ""
    _, order = shopper_order
    forged = post_webhook(Client(), payment_id="pay_x", order_id=order.id, amount=3000, status="succeeded", secret="")
    assert forged.status_code == 401
    assert Order.objects.get(id=order.id).status == OrderStatus.PENDING_PAYMENT
