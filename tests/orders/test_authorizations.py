"""Authorizations that end (orders/services/authorizations.py): the hourly job
tells order managers of a paid, unshipped order whose hold ends within a day,
once, and captures it; staff see when each order's hold ends. Every moment here
is the payment's own authorization end plus or minus a span: no test depends
on the hour it runs at."""

from datetime import timedelta

import pytest
from django.core import mail
from django.core.management import call_command

from orders.models import Order, OrderStatus, Payment, Refund
from orders.services import refund_paid_order
from orders.services.authorizations import capture_ending_authorizations
from tests.orders.test_payment_lifecycle import authorize, events

pytestmark = pytest.mark.django_db


def test_the_hourly_job_captures_an_order_a_day_before_its_authorization_ends_and_tells_managers_once(
    provider, order, order_manager, settings
):
    settings.PAYMENT_AUTHORIZATION_DAYS = 7
    payment = authorize(order)
    ends = payment.authorization_ends_at
    assert ends - payment.authorized_at == timedelta(days=7)

    early = capture_ending_authorizations(now=ends - timedelta(days=1, minutes=1))
    assert (early.captured, early.warned) == ([], []) and provider.called("captures") == []
    assert not mail.outbox

    run = capture_ending_authorizations(now=ends - timedelta(hours=23))
    assert (run.captured, run.warned) == ([order.id], [order.id])
    [(key, body)] = provider.called("captures")
    assert (key, body["amount"]) == (f"capture-{payment.id}", order.total_amount)
    payment.refresh_from_db()
    assert payment.status == Payment.Status.CAPTURED
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID  # captured, not shipped
    [told] = mail.outbox
    assert told.to == [order_manager.user.email]
    assert f"order {order.id}: {payment.provider_payment_id}" in told.body and "captured now" in told.body

    again = capture_ending_authorizations(now=ends - timedelta(hours=22))
    assert (again.captured, again.warned) == ([], []) and len(mail.outbox) == 1
    assert len(events(order, "PaymentCaptured")) == 1

    # Its money taken, a cancellation gives it back rather than voiding it.
    refund = refund_paid_order(order_id=order.id)
    assert (refund.amount, refund.reason) == (order.total_amount, Refund.Reason.STAFF)


def test_with_capture_before_expiry_off_managers_are_told_and_nothing_is_captured(
    provider, order, order_manager, settings
):
    settings.PAYMENT_CAPTURE_BEFORE_EXPIRY = False
    payment = authorize(order)
    run = capture_ending_authorizations(now=payment.authorization_ends_at - timedelta(hours=2))
    assert (run.captured, run.waiting, run.warned) == ([], [order.id], [order.id])
    assert provider.called("captures") == []
    [told] = mail.outbox
    assert "not captured (PAYMENT_CAPTURE_BEFORE_EXPIRY off, or the provider down): ship or capture it" in told.body


def test_the_provider_down_leaves_the_order_for_the_next_run(provider, order, order_manager):
    payment = authorize(order)
    provider.unavailable = 100
    run = capture_ending_authorizations(now=payment.authorization_ends_at - timedelta(hours=1))
    assert run.waiting == [order.id] and run.captured == []
    provider.unavailable = 0
    later = capture_ending_authorizations(now=payment.authorization_ends_at - timedelta(minutes=30))
    assert later.captured == [order.id] and later.warned == []  # told once already


def test_staff_see_when_the_money_held_ends_and_shop_status_lists_it(
    provider, order, order_manager, capsys, monkeypatch
):
    payment = authorize(order)
    page = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert f"{payment.authorization_ends_at:%Y-%m-%d %H:%M} UTC (in 6 d 23 h)" in page

    from django.utils import timezone

    soon = payment.authorization_ends_at - timedelta(hours=3)
    monkeypatch.setattr(timezone, "now", lambda: soon)
    call_command("shop_status")
    out = capsys.readouterr().out
    assert "paid, not shipped, authorization ending within a day: 1" in out
    assert f"order {order.id}" in out and payment.provider_payment_id in out
    dashboard = order_manager.get("/admin/dashboard/")
    assert dashboard.context["authorizations_ending"] == 1 and dashboard.context["payments_lapsed"] == 0
