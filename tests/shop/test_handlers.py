"""shop/handlers.py: the loyalty consumer's points, applied through the same
once-only path the Kafka runner uses."""

import pytest

from outbox.consumers import apply_event
from shop.models import LoyaltyEntry
from tests.helpers import order_paid_event, refund_requested_event

pytestmark = pytest.mark.django_db


def test_loyalty_points_are_earned_then_reversed_once(placed_order):
    paid, refunded = order_paid_event(placed_order), refund_requested_event(placed_order)
    assert apply_event(consumer="loyalty", event=paid) == "processed"
    assert apply_event(consumer="loyalty", event=refunded) == "processed"
    second_refund = refund_requested_event(placed_order)  # a second refund event
    assert apply_event(consumer="loyalty", event=second_refund) == "processed"
    assert sorted(LoyaltyEntry.objects.values_list("points", flat=True)) == [-25, 25]


def test_refund_without_points_reverses_nothing(placed_order):
    apply_event(consumer="loyalty", event=refund_requested_event(placed_order))
    assert not LoyaltyEntry.objects.exists()
