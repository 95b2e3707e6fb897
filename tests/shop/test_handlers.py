"""shop/handlers.py: the loyalty consumer's points, applied through the same
once-only path the Kafka runner uses."""

import pytest

from outbox.consumers import apply_event
from shop.models import LoyaltyEntry
from tests.helpers import consumer_event, order_paid_event, refund_completed_event

pytestmark = pytest.mark.django_db


def points(order) -> list[int]:
    return sorted(LoyaltyEntry.objects.filter(order_id=order.id).values_list("points", flat=True))


def test_loyalty_points_are_earned_then_taken_back_once(placed_order):
    paid, refunded = order_paid_event(placed_order), refund_completed_event(placed_order)
    assert apply_event(consumer="loyalty", event=paid) == "processed"
    assert apply_event(consumer="loyalty", event=refunded) == "processed"
    assert apply_event(consumer="loyalty", event=refunded) == "duplicate"
    second = refund_completed_event(placed_order, refund_id=2)  # another refund: nothing left to take
    assert apply_event(consumer="loyalty", event=second) == "processed"
    assert points(placed_order) == [-25, 25]


def test_partial_refunds_take_back_their_share_and_the_last_one_the_rest(placed_order):
    apply_event(consumer="loyalty", event=order_paid_event(placed_order))  # 25 points for 25.00
    apply_event(consumer="loyalty", event=refund_completed_event(placed_order, amount=1299, refund_id=1))
    assert points(placed_order) == [-12, 25]
    last = refund_completed_event(placed_order, amount=1201, refund_id=2, payment_refunded=True)
    apply_event(consumer="loyalty", event=last)
    assert points(placed_order) == [-13, -12, 25]  # the payment refunded in full: all that was left
    assert sum(points(placed_order)) == 0


def test_removed_lines_take_back_points_only_when_no_refund_will(placed_order):
    apply_event(consumer="loyalty", event=order_paid_event(placed_order))
    removed = dict(
        order_id=placed_order.id,
        customer_id=placed_order.customer_id,
        amount=1250,
        currency="EUR",
        lines=[],
        total=1250,
        items=[],
    )
    apply_event(consumer="loyalty", event=consumer_event("OrderLinesCancelled", **removed, refund_id=7))
    assert points(placed_order) == [25]  # captured: RefundCompleted takes them back
    apply_event(consumer="loyalty", event=consumer_event("OrderLinesCancelled", **removed, refund_id=None))
    assert points(placed_order) == [-12, 25]


def test_refund_without_points_takes_back_nothing(placed_order):
    apply_event(consumer="loyalty", event=refund_completed_event(placed_order))
    assert not LoyaltyEntry.objects.exists()


def test_a_refund_of_money_that_paid_no_order_takes_no_points(placed_order):
    apply_event(consumer="loyalty", event=order_paid_event(placed_order))
    late = refund_completed_event(placed_order)  # a second payment, refunded in full
    late.data["reason"] = "order_not_pending"
    apply_event(consumer="loyalty", event=late)
    wrong = refund_completed_event(placed_order, refund_id=2)  # a payment of another amount, refunded
    wrong.data["reason"] = "amount_mismatch"
    apply_event(consumer="loyalty", event=wrong)
    assert points(placed_order) == [25]
