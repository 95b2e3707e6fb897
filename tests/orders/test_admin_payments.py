"""orders/admin/: an order's payment timeline, and staff capturing or voiding
its payment (a confirmation page first) against a fake provider on a real socket."""

import pytest
from django.contrib.auth.models import Permission

from inventory.models import Stock
from orders.models import Order, OrderStatus, Payment
from orders.services import refund_paid_order
from tests.factories import UserFactory, product_with_stock
from tests.helpers import place_pending_order, staff_client
from tests.orders.test_payment_lifecycle import authorize

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(redis):
    """A pending order of 2 x "A" at 1,250 (10 in stock): €25.00."""
    product_with_stock(sku="A", price=1250, available=10)
    return place_pending_order(redis, UserFactory(), {"A": 2})


def act(client, action: str, *orders, confirmed: bool = True):
    data = {"action": action, "_selected_action": [o.id for o in orders]}
    if confirmed:
        data["post"] = "yes"
    return client.post("/admin/orders/order/", data, follow=True)


def said(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def test_payment_timeline_shows_each_step_of_a_payment_and_its_refund(order_manager, provider, order):
    authorize(order, "pay_tl")
    page = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert 'class="fieldset-heading">Payments</h2>' in page
    assert "<strong>pay_tl</strong> &middot; €25.00 &middot; Authorized &middot; Paid the order" in page
    assert "<li>authorized " in page and "<li>captured " not in page

    act(order_manager, "capture_payments", order)
    refund_paid_order(order_id=order.id)
    page = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert "<strong>pay_tl</strong> &middot; €25.00 &middot; Captured &middot; Paid the order" in page
    authorized, captured = page.index("<li>authorized "), page.index("<li>captured ")
    refund = page.index("<li>refund of €25.00 (Refunded by staff, Requested) requested ")
    assert authorized < captured < refund  # oldest first
    assert "<li>voided " not in page and "completed " not in page  # only the moments that happened


def test_capture_action_asks_for_confirmation_then_captures(order_manager, provider, order):
    payment = authorize(order, "pay_cap")
    asked = act(order_manager, "capture_payments", order, confirmed=False)
    assert asked.status_code == 200
    assert [t.name for t in asked.templates][0] == "admin/orders/order/payment_action_confirmation.html"
    body = asked.content.decode()
    assert f"<td>{order.id}</td>" in body and "<td>€25.00</td>" in body and "pay_cap (Authorized)" in body
    assert 'name="post" value="yes"' in body and 'value="capture_payments"' in body and 'value="Confirm"' in body
    listing = order_manager.get(f"/admin/orders/order/?action=capture_payments&_selected_action={order.id}&post=yes")
    assert listing.status_code in (200, 302)  # a GET runs no action
    payment.refresh_from_db()
    assert payment.status == Payment.Status.AUTHORIZED and provider.calls == []

    done = act(order_manager, "capture_payments", order)
    assert said(done) == [("success", f"Order {order.id}: captured €25.00.")]
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURED and payment.captured_at is not None
    assert provider.called("captures") == [
        (f"capture-{payment.id}", {"payment_id": "pay_cap", "amount": 2500, "currency": "EUR"})
    ]
    again = act(order_manager, "capture_payments", order)
    assert said(again) == [("warning", f"Order {order.id}: nothing to capture.")]
    assert len(provider.called("captures")) == 1


def test_capture_action_with_the_provider_down_warns_and_leaves_the_claim(order_manager, provider, order):
    payment = authorize(order, "pay_down")
    provider.unavailable = 100  # more than the client's retries
    response = act(order_manager, "capture_payments", order)
    assert response.status_code == 200
    assert said(response) == [
        ("warning", f"Order {order.id}: the payment provider is unavailable, nothing captured yet: try again.")
    ]
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURING and payment.captured_at is None

    provider.unavailable = 0
    assert said(act(order_manager, "capture_payments", order)) == [("success", f"Order {order.id}: captured €25.00.")]
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURED
    assert {key for key, _ in provider.called("captures")} == {f"capture-{payment.id}"}  # one capture, retried


def test_void_action_asks_for_confirmation_then_cancels_the_order_and_voids_its_payment(order_manager, provider, order):
    payment = authorize(order, "pay_void")
    asked = act(order_manager, "void_payments", order, confirmed=False)
    assert 'value="void_payments"' in asked.content.decode() and "pay_void (Authorized)" in asked.content.decode()
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID and provider.calls == []

    done = act(order_manager, "void_payments", order)
    assert said(done) == [("success", f"Order {order.id}: cancelled, stock returned, payment voided.")]
    assert Order.objects.get(id=order.id).status == OrderStatus.CANCELLED
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDED and payment.voided_at is not None
    assert [key for key, _ in provider.called("voids")] == [f"void-{payment.id}"] and not provider.called("captures")
    assert Stock.objects.filter(product_id="A").values_list("available", "reserved").get() == (10, 0)


def test_void_action_with_the_provider_down_cancels_and_leaves_the_void_to_the_consumer(order_manager, provider, order):
    payment = authorize(order, "pay_void_down")
    provider.unavailable = 100
    [(level, message)] = said(act(order_manager, "void_payments", order))
    assert level == "warning" and "cancelled, stock returned" in message and "consumer will void" in message
    assert Order.objects.get(id=order.id).status == OrderStatus.CANCELLED
    payment.refresh_from_db()
    assert payment.status == Payment.Status.VOIDING  # claimed: the payments consumer releases it


def test_void_action_leaves_an_order_whose_payment_was_captured(order_manager, provider, order, redis):
    authorize(order, "pay_taken", status="succeeded")  # authorized and captured at once
    pending = place_pending_order(redis, UserFactory(), {"A": 1})
    response = act(order_manager, "void_payments", order, pending)
    assert sorted(said(response)) == sorted(
        [
            ("warning", f"Order {order.id}: captured: refund it instead."),
            ("warning", f"Order {pending.id}: skipped, it is PENDING_PAYMENT."),
        ]
    )
    statuses = dict(Order.objects.values_list("id", "status"))
    assert statuses == {order.id: OrderStatus.PAID, pending.id: OrderStatus.PENDING_PAYMENT}
    assert Payment.objects.get(provider_payment_id="pay_taken").status == Payment.Status.CAPTURED
    assert provider.calls == []


@pytest.mark.parametrize("action", ["capture_payments", "void_payments"])
def test_a_stock_manager_can_run_neither_payment_action(stock_manager, provider, order, action):
    payment = authorize(order, "pay_stock")
    assert stock_manager.get("/admin/orders/order/").status_code == 403
    for confirmed in (False, True):
        assert act(stock_manager, action, order, confirmed=confirmed).status_code == 403
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    assert Payment.objects.get(id=payment.id).status == Payment.Status.AUTHORIZED and provider.calls == []


def test_payment_actions_are_offered_only_to_staff_who_may_change_orders(order_manager, provider, order):
    authorize(order, "pay_view")
    assert 'value="capture_payments"' in order_manager.get("/admin/orders/order/").content.decode()
    viewer = staff_client()
    viewer.user.user_permissions.add(Permission.objects.get(codename="view_order"))
    listing = viewer.get("/admin/orders/order/").content.decode()
    assert "capture_payments" not in listing and "void_payments" not in listing
    for action in ("capture_payments", "void_payments"):
        act(viewer, action, order)
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID and provider.calls == []
