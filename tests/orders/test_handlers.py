"""orders/handlers.py: the email consumer's notices, applied through the same
once-only path the Kafka runner uses."""

import pytest
from django.core import mail

from orders.models import Notification
from outbox.consumers import apply_event
from tests.helpers import consumer_event, order_paid_event, refund_requested_event

pytestmark = pytest.mark.django_db


def test_email_notices_for_paid_cancelled_and_refunded(placed_order):
    apply_event(consumer="email", event=order_paid_event(placed_order))
    cancelled = consumer_event(
        "OrderCancelled", order_id=placed_order.id, customer_id=placed_order.customer_id, reason="expired"
    )
    apply_event(consumer="email", event=cancelled)
    apply_event(consumer="email", event=refund_requested_event(placed_order))
    assert list(Notification.objects.order_by("id").values_list("kind", flat=True)) == [
        "order_confirmed",
        "order_cancelled",
        "refund_requested",
    ]
    assert [m.to for m in mail.outbox] == [["buyer@example.com"]] * 3
    assert "not paid in time" in mail.outbox[1].body


def test_email_notices_for_removed_lines_and_returns(placed_order):
    who = {"order_id": placed_order.id, "customer_id": placed_order.customer_id}
    removed = consumer_event(
        "OrderLinesCancelled",
        **who,
        lines=[{"sku": "A", "quantity": 1, "amount": 1250}],
        amount=1250,
        currency="EUR",
        total=1250,
        refund_id=None,
        items=[],
    )
    apply_event(consumer="email", event=removed)
    apply_event(consumer="email", event=consumer_event("ReturnApproved", **who, return_id=1))
    apply_event(consumer="email", event=consumer_event("ReturnRejected", **who, return_id=2))
    received = consumer_event(
        "ReturnReceived",
        **who,
        return_id=1,
        refund_id=9,
        amount=1250,
        currency="EUR",
        lines=[{"sku": "A", "quantity": 1, "condition": "restock"}],
    )
    apply_event(consumer="email", event=received)
    assert list(Notification.objects.order_by("id").values_list("kind", flat=True)) == [
        "lines_cancelled",
        "return_decided",
        "return_decided",
        "return_received",
    ]
    removed_mail, approved, rejected, arrived = mail.outbox
    assert "1 x A (€12.50)" in removed_mail.body and "€12.50 will not be charged" in removed_mail.body
    assert "costs €12.50" in removed_mail.body
    assert "approved" in approved.subject and "declined" in rejected.subject
    assert "1 x A" in arrived.body and "€12.50 is on its way back to you" in arrived.body


def test_the_receipt_says_what_was_captured(placed_order):
    from orders.models import Payment

    Payment.objects.create(
        provider_payment_id="p",
        order=placed_order,
        amount=2500,
        captured_amount=1250,
        currency="EUR",
        status="captured",
        outcome="applied",
        received_at=placed_order.created_at,
        authorized_at=placed_order.created_at,
        captured_at=placed_order.created_at,
    )
    captured = consumer_event(
        "PaymentCaptured", order_id=placed_order.id, payment_id="p", amount=2500, captured_amount=1250, currency="EUR"
    )
    apply_event(consumer="email", event=captured)
    assert "We have taken €12.50" in mail.outbox[0].body


@pytest.mark.parametrize("reason", ["return", "lines_cancelled"])
def test_a_refund_told_by_its_own_notice_sends_no_refund_notice(placed_order, reason):
    """A return's refund is told with ReturnReceived, removed lines' with OrderLinesCancelled."""
    refund = refund_requested_event(placed_order)
    refund.data["reason"] = reason
    apply_event(consumer="email", event=refund)
    assert not Notification.objects.exists() and mail.outbox == []
    goodwill = refund_requested_event(placed_order)
    goodwill.data.update(reason="goodwill", refund_id=2)
    apply_event(consumer="email", event=goodwill)
    assert [m.subject for m in mail.outbox] == [f"Refund for order {placed_order.id}"]
