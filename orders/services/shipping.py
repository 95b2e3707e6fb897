"""A paid order leaves the warehouse, never before its money is taken: a payment
whose money is only held (PAYMENT_CAPTURE=on_shipment) is captured first
(orders/services/authorizations.py capture_for_order), and the order moves
PAID -> SHIPPED only in a transaction that finds what it costs captured. A capture refused keeps the order
PAID (its timeline says why; a lapsed hold makes it PAYMENT_LAPSED); a provider
that is down keeps it waiting. Either way the caller is told, and nothing ships."""

from django.db import transaction
from django.utils import timezone

from inventory.services import ship_order
from orders import money
from orders.exceptions import OrderNotShippable, PaymentProviderUnavailable
from orders.models import Order, OrderStatus
from orders.services.authorizations import capture_for_order
from orders.services.cancellation import reserved_lines
from orders.transitions import move_orders
from outbox.services import record_event


def mark_order_shipped(*, order_id: int) -> Order:
    """Capture the order's payment if its money is only held, then ship it.
    OrderNotShippable (409) when it is not PAID or its capture was refused;
    PaymentProviderUnavailable (503) when the provider could not be asked."""
    if held := money.held_payment(order_id=order_id):  # on_shipment; or left authorized by an earlier setting
        outcome = capture_for_order(held)
        if outcome == "waiting":
            raise PaymentProviderUnavailable(
                "The payment provider is unavailable: the order waits, unshipped, until its money can be captured."
            )
        if outcome != "captured":
            why = (
                "its authorization lapsed: ask the shopper to pay again, or cancel it"
                if outcome == "lapsed"
                else ("the payment provider refused the capture (see the order's timeline)")
            )
            raise OrderNotShippable(f"Not shipped: {why}.", order_id=order_id, capture=outcome)
    return _ship(order_id)


@transaction.atomic
def _ship(order_id: int) -> Order:
    """PAID -> SHIPPED, its units reserved -> shipped and its shipment marked so by
    the warehouse (inventory.services), if the money that paid it is taken."""
    now = timezone.now()
    if not move_orders([order_id], OrderStatus.SHIPPED, at=now):
        raise OrderNotShippable(order_id=order_id)
    order = Order.objects.get(id=order_id)
    payment = money.applied_payment(order_id=order_id, lock=True)
    if order.total_amount and not (money.is_taken(payment) and payment.captured_amount >= order.total_amount):
        transaction.set_rollback(True)
        raise OrderNotShippable(
            "Not shipped: its money is not captured yet.", order_id=order_id, payment=getattr(payment, "status", None)
        )
    items = ship_order(
        order_id=order.id,
        lines=reserved_lines(order_ids=[order.id]),
        shipping_address=order.shipping_address,
        shipped_at=now,
    )
    record_event(
        aggregate_type="order",
        aggregate_id=order.id,
        event_type="OrderShipped",
        data={
            "order_id": order.id,
            "customer_id": order.customer_id,
            "shipped_at": now.isoformat(),
            "items": items,
            "shipping_address": order.shipping_address,
        },
    )
    return order
