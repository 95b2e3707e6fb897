"""The loyalty consumer: 1 point per whole currency unit paid, reversed on
refund, or when a paid order is cancelled before shipping (its payment voided)."""

from django.db.models import Sum

from outbox.consumers import Event, register
from shop.models import LoyaltyEntry

MINOR_UNITS_PER_POINT = 100


@register("loyalty", "OrderPaid")
def award_points(event: Event) -> None:
    points = event.data["total"] // MINOR_UNITS_PER_POINT
    if points:
        LoyaltyEntry.objects.get_or_create(
            order_id=event.data["order_id"],
            reason=LoyaltyEntry.Reason.ORDER_PAID,
            defaults={"customer_id": event.data["customer_id"], "points": points},
        )


@register("loyalty", "RefundRequested")
def reverse_points(event: Event) -> None:
    _reverse(event, LoyaltyEntry.Reason.ORDER_REFUNDED)


@register("loyalty", "OrderCancelled")
def reverse_points_of_a_cancelled_paid_order(event: Event) -> None:
    if event.data.get("was_paid"):
        _reverse(event, LoyaltyEntry.Reason.ORDER_CANCELLED)


def _reverse(event: Event, reason: str) -> None:
    """The order's points taken back, once per reason (a unique constraint)."""
    order_id = event.data.get("order_id")
    if order_id is None:
        return
    earned = LoyaltyEntry.objects.filter(order_id=order_id).aggregate(total=Sum("points"))["total"] or 0
    if earned > 0:
        LoyaltyEntry.objects.get_or_create(
            order_id=order_id, reason=reason, defaults={"customer_id": event.data["customer_id"], "points": -earned}
        )
