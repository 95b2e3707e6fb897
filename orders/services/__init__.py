"""Everything that writes orders: checkout, the flash-sale queue, payments,
cancellation, refunds, returns, lines removed and shipping."""

from orders.services.amendments import remove_order_lines
from orders.services.cancellation import (
    cancel_customer_order,
    cancel_orders,
    cancel_pending_order,
    expire_unpaid_orders,
)
from orders.services.checkout import PlacedOrder, get_customer_order, place_order
from orders.services.payments import PaymentResult, handle_payment_webhook
from orders.services.refunds import refund_goodwill, refund_paid_order, retry_refund
from orders.services.returns import (
    ReturnLineRequest,
    approve_return,
    customer_returns,
    receive_return,
    reject_return,
    request_return,
)
from orders.services.shipping import mark_order_shipped

__all__ = [
    "PaymentResult",
    "PlacedOrder",
    "ReturnLineRequest",
    "approve_return",
    "cancel_customer_order",
    "cancel_orders",
    "cancel_pending_order",
    "customer_returns",
    "expire_unpaid_orders",
    "get_customer_order",
    "handle_payment_webhook",
    "mark_order_shipped",
    "place_order",
    "receive_return",
    "refund_goodwill",
    "refund_paid_order",
    "reject_return",
    "remove_order_lines",
    "request_return",
    "retry_refund",
]
