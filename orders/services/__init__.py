"""Everything that writes orders: checkout, the flash-sale queue, payments,
cancellation, refunds and shipping."""

from orders.services.cancellation import (
    cancel_customer_order,
    cancel_orders,
    cancel_pending_order,
    expire_unpaid_orders,
)
from orders.services.checkout import PlacedOrder, get_customer_order, place_order
from orders.services.payments import PaymentResult, handle_payment_webhook
from orders.services.refunds import refund_paid_order
from orders.services.shipping import mark_order_shipped

__all__ = [
    "PaymentResult",
    "PlacedOrder",
    "cancel_customer_order",
    "cancel_orders",
    "cancel_pending_order",
    "expire_unpaid_orders",
    "get_customer_order",
    "handle_payment_webhook",
    "mark_order_shipped",
    "place_order",
    "refund_paid_order",
]
