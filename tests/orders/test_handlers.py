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
