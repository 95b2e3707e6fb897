"""Everything that writes orders: checkout, payments, cancellation and refunds."""

from orders.services.cancellation import (
    cancel_customer_order,
    cancel_orders,
    cancel_pending_order,
    expire_unpaid_orders,
    mark_order_shipped,
    refund_paid_order,
)
from orders.services.checkout import PlacedOrder, get_customer_order, place_order
from orders.services.payments import PaymentResult, handle_payment_webhook

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
