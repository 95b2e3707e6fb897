"""The orders app's models, one module per aggregate. Import them from here
(`from orders.models import Order`); the modules refer to each other's models
by name ("orders.Order"), so none of them imports another."""

from orders.models.checkout import PendingOrderCount, QueuedOrderAlias, UnpaidHold
from orders.models.notifications import Notification
from orders.models.orders import Order, OrderItem, OrderQuerySet, OrderStatus
from orders.models.payments import (
    CAPTURED_STATUSES,
    Payment,
    PaymentOutcome,
    PaymentSession,
    PaymentStatus,
    Refund,
    RefundReason,
    RefundStatus,
)
from orders.models.returns import Return, ReturnCondition, ReturnLine, ReturnStatus

__all__ = [
    "CAPTURED_STATUSES",
    "Notification",
    "Order",
    "OrderItem",
    "OrderQuerySet",
    "OrderStatus",
    "Payment",
    "PaymentOutcome",
    "PaymentSession",
    "PaymentStatus",
    "PendingOrderCount",
    "QueuedOrderAlias",
    "Refund",
    "RefundReason",
    "RefundStatus",
    "Return",
    "ReturnCondition",
    "ReturnLine",
    "ReturnStatus",
    "UnpaidHold",
]
