"""The loyalty consumer: 1 point per whole currency unit paid. Points go back
with the money: a completed refund takes back 1 point per whole currency unit
refunded (all that is left once the payment is refunded in full), lines
removed before the capture take back theirs, and a paid order cancelled
before shipping (its payment voided) takes back all that is left. Each entry
once: its source is unique per order and reason, and an order's points never
go below zero."""

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


# Refunds of a payment that paid no order (late, wrong amount, unknown order): it earned nothing.
NOT_THE_ORDERS_MONEY = {"order_not_pending", "amount_mismatch", "unknown_order"}
# What the provider captured beyond the order after lines were removed: their points went
# with OrderLinesCancelled (unless it is the last money of the order to go back: then all).
EXCESS_CAPTURE = "excess_capture"


@register("loyalty", "RefundCompleted")
def take_back_refunded_points(event: Event) -> None:
    data = event.data
    every = data.get("payment_refunded", False)
    if data.get("reason") in NOT_THE_ORDERS_MONEY or (data.get("reason") == EXCESS_CAPTURE and not every):
        return
    _take_back(
        event,
        LoyaltyEntry.Reason.ORDER_REFUNDED,
        source=f"refund-{data['refund_id']}",
        points=None if every else data["amount"] // MINOR_UNITS_PER_POINT,
    )


@register("loyalty", "OrderLinesCancelled")
def take_back_points_of_removed_lines(event: Event) -> None:
    if event.data.get("refund_id"):
        return  # the money was taken: its refund takes the points back as it completes
    _take_back(
        event,
        LoyaltyEntry.Reason.LINES_REMOVED,
        source=f"lines-{event.event_id}",
        points=event.data["amount"] // MINOR_UNITS_PER_POINT,
    )


@register("loyalty", "OrderCancelled")
def reverse_points_of_a_cancelled_paid_order(event: Event) -> None:
    """Whatever points the order still has go: an order never paid has none, and
    one paid once whose payment lapsed (cancelled from PAYMENT_LAPSED, or asked
    to pay again and left to expire) gives back what its first payment earned."""
    _take_back(event, LoyaltyEntry.Reason.ORDER_CANCELLED, source="", points=None)


def _take_back(event: Event, reason: str, *, source: str, points: int | None) -> None:
    """`points` of the order's (None: all it has left), never more than it has,
    once per (order, reason, source): a unique constraint."""
    order_id = event.data.get("order_id")
    if order_id is None:
        return  # a payment that paid no order earned nothing
    left = LoyaltyEntry.objects.filter(order_id=order_id).aggregate(total=Sum("points"))["total"] or 0
    taken = left if points is None else min(points, left)
    if taken > 0:
        LoyaltyEntry.objects.get_or_create(
            order_id=order_id,
            reason=reason,
            source=source,
            defaults={"customer_id": event.data["customer_id"], "points": -taken},
        )


@register("loyalty", "CustomerErased")
def keep_points_of_an_erased_customer(event: Event) -> None:
    """Nothing to erase: an entry holds the customer's id, an order id, points, a
    reason and a date, nothing that names or reaches the shopper (the id now
    points at the anonymous account). The points stay, as the money they stand
    for does. Registered so that the loyalty consumer says it heard, and so that
    a field added here that is personal is not forgotten."""
