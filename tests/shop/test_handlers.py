"""The consumers' effects, applied through the same once-only path the Kafka runner uses."""

import uuid

import pytest
from django.core import mail

from inventory.models import Shipment
from orders.models import Notification
from outbox.consumers import Event, apply_event
from shop.models import LoyaltyEntry
from tests.factories import UserFactory, product_with_stock
from tests.orders.conftest import place_pending_order

pytestmark = pytest.mark.django_db


def event(event_type, **data):
    return Event(uuid.uuid4(), event_type, "2026-12-02T12:00:00+00:00", "order", str(data.get("order_id")), data)


@pytest.fixture
def order(redis):
    product_with_stock(sku="A", price=1250, available=5)
    return place_pending_order(redis, UserFactory(email="buyer@example.com"), {"A": 2})


def paid(order):
    items = [{"sku": "A", "name": "Product", "quantity": 2, "unit_price": 1250}]
    return event("OrderPaid", order_id=order.id, customer_id=order.customer_id, total=2500, currency="EUR",
                 items=items)  # fmt: skip


def refunded(order):
    return event("RefundRequested", order_id=order.id, customer_id=order.customer_id, amount=2500, currency="EUR",
                 payment_id="p", reason="staff", refund_id=1)  # fmt: skip


def test_loyalty_points_are_earned_then_reversed_once(order):
    assert apply_event(consumer="loyalty", event=paid(order)) == "processed"
    assert apply_event(consumer="loyalty", event=refunded(order)) == "processed"
    assert apply_event(consumer="loyalty", event=refunded(order)) == "processed"  # a second refund event
    assert sorted(LoyaltyEntry.objects.values_list("points", flat=True)) == [-25, 25]


def test_refund_without_points_reverses_nothing(order):
    apply_event(consumer="loyalty", event=refunded(order))
    assert not LoyaltyEntry.objects.exists()


def test_email_notices_for_paid_cancelled_and_refunded(order):
    apply_event(consumer="email", event=paid(order))
    apply_event(consumer="email", event=event("OrderCancelled", order_id=order.id, customer_id=order.customer_id,
                                               reason="expired"))  # fmt: skip
    apply_event(consumer="email", event=refunded(order))
    assert list(Notification.objects.order_by("id").values_list("kind", flat=True)) == [
        "order_confirmed",
        "order_cancelled",
        "refund_requested",
    ]
    assert [m.to for m in mail.outbox] == [["buyer@example.com"]] * 3
    assert "not paid in time" in mail.outbox[1].body


def test_warehouse_requests_one_shipment_per_paid_order(order):
    apply_event(consumer="warehouse", event=paid(order))
    apply_event(consumer="warehouse", event=paid(order))  # another event id for the same order
    assert Shipment.objects.filter(order_id=order.id).count() == 1
