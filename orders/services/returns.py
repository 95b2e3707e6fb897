"""Returns: a shopper asks to send units of a shipped order back within
RETURN_WINDOW_DAYS; staff approve or reject the request, then receive the
parcel line by line with a condition: units fit to sell go back on sale,
damaged ones are written off (both through the stock ledger), and the
received units are refunded at the price paid for them.

Each line's `in_returns` (units claimed by returns not rejected) grows by one
conditional UPDATE within what shipped, under the CHECK
order_item_returns_within_shipped: two returns of the same line racing can
never claim more than was shipped. A rejection gives the units back."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Prefetch, prefetch_related_objects
from django.utils import timezone

from inventory.services import take_back_returned
from orders import money
from orders.exceptions import (
    NothingToReturn,
    OrderNotFound,
    OrderNotShipped,
    ReturnNotDecidable,
    ReturnNotFound,
    ReturnNotReceivable,
    ReturnWindowClosed,
    SkuNotOnOrder,
    TooManyUnits,
)
from orders.locks import lock_items, lock_order
from orders.models import Order, OrderItem, OrderStatus, Refund, Return, ReturnCondition, ReturnLine
from orders.services.refunds import refund_units
from orders.transitions import move_return
from outbox.services import record_event


@dataclass(frozen=True)
class ReturnLineRequest:
    sku: str
    quantity: int


@transaction.atomic
def request_return(*, customer_id: int, order_id: int, lines: list[ReturnLineRequest], reason: str = "") -> Return:
    """The shopper's return of `lines` of their order: all lines or none. The
    order is locked first, as every writer of its lines locks it (a removal or a
    refund of the same lines waits)."""
    order = lock_order(order_id, customer_id=customer_id)
    if order is None:
        raise OrderNotFound()
    if order.shipped_at is None or order.status not in (OrderStatus.SHIPPED, OrderStatus.REFUNDED):
        raise OrderNotShipped(status=order.status)
    closes = order.shipped_at + timedelta(days=settings.RETURN_WINDOW_DAYS)
    if timezone.now() > closes:
        raise ReturnWindowClosed(closed_at=closes.isoformat())
    items = {item.product_id: item for item in order.items.all()}
    if all(item.in_returns >= item.shipped_units for item in items.values()):
        raise NothingToReturn()
    unknown = sorted({line.sku for line in lines} - set(items))
    if unknown:
        raise SkuNotOnOrder(skus=unknown)
    returned = Return.objects.create(order=order, reason=reason)
    for line in sorted(lines, key=lambda line: items[line.sku].id):  # item order, as every writer locks them
        item = items[line.sku]
        # The count, not a read of it: of two returns racing for the line's last unit, one UPDATE finds no row.
        claimed = OrderItem.objects.filter(id=item.id, in_returns__lte=F("quantity") - F("cancelled") - line.quantity)
        if not claimed.update(in_returns=F("in_returns") + line.quantity):
            item.refresh_from_db()
            raise TooManyUnits(sku=line.sku, returnable=max(0, item.shipped_units - item.in_returns))
    ReturnLine.objects.bulk_create(
        [ReturnLine(return_request=returned, item=items[line.sku], quantity=line.quantity) for line in lines]
    )
    _shown(returned)
    record_event(
        aggregate_type="order",
        aggregate_id=order.id,
        event_type="ReturnRequested",
        data={
            "return_id": returned.id,
            "order_id": order.id,
            "customer_id": order.customer_id,
            "reason": reason,
            "lines": [{"sku": line.sku, "quantity": line.quantity} for line in lines],
        },
    )
    return returned


# A return's lines with their items, in one query.
LINES_WITH_ITEMS = Prefetch("lines", queryset=ReturnLine.objects.select_related("item"))


def _shown(returned: Return) -> None:
    """Its lines as the API shows them (one query)."""
    prefetch_related_objects([returned], LINES_WITH_ITEMS)


def customer_returns(*, customer_id: int, order_id: int) -> list[Return]:
    if not Order.objects.filter(id=order_id, customer_id=customer_id).exists():
        raise OrderNotFound()
    return list(Return.objects.filter(order_id=order_id).prefetch_related(LINES_WITH_ITEMS).select_related("refund"))


@transaction.atomic
def approve_return(*, return_id: int, user=None) -> Return:
    return _decide(return_id, Return.Status.APPROVED, user=user)


@transaction.atomic
def reject_return(*, return_id: int, user=None) -> Return:
    """Rejected: its units may be returned again (within the window)."""
    returned = _decide(return_id, Return.Status.REJECTED, user=user)
    for line in sorted(returned.lines.all(), key=lambda line: line.item_id):  # item order, as every writer
        OrderItem.objects.filter(id=line.item_id).update(in_returns=F("in_returns") - line.quantity)
    return returned


def _decide(return_id: int, target: str, *, user) -> Return:
    order_id = Return.objects.filter(id=return_id).values_list("order_id", flat=True).first()
    if order_id is None:
        raise ReturnNotFound()
    lock_order(order_id)  # the order first, as every writer locks it
    if not move_return(return_id, target, decided_at=timezone.now(), decided_by=user):
        raise ReturnNotDecidable(status=Return.objects.get(id=return_id).status)
    returned = Return.objects.select_related("order").prefetch_related("lines__item").get(id=return_id)
    record_event(
        aggregate_type="order",
        aggregate_id=order_id,
        event_type="ReturnApproved" if target == Return.Status.APPROVED else "ReturnRejected",
        data={"return_id": return_id, "order_id": order_id, "customer_id": returned.order.customer_id},
    )
    return returned


@transaction.atomic
def receive_return(*, return_id: int, conditions: Mapping[str, str], user=None) -> Return:
    """The parcel arrived: each line's `condition` ({sku: "restock" | "damaged"},
    every line of the return) decides where its units go, and the received units
    are refunded at the price paid (capped at what is left of the capture). A
    return still REQUESTED is approved by being received. Its payment must be
    captured (PaymentNotCaptured otherwise: the capture on shipment is late)."""
    order_id = Return.objects.filter(id=return_id).values_list("order_id", flat=True).first()
    if order_id is None:
        raise ReturnNotFound()
    order = lock_order(order_id)
    lines = list(ReturnLine.objects.filter(return_request_id=return_id).select_related("item").order_by("item_id"))
    skus = {line.item.product_id for line in lines}
    if set(conditions) != skus or not set(conditions.values()) <= set(ReturnCondition.values):
        raise ValueError(f"a condition (restock or damaged) for each of {sorted(skus)}")
    payment = money.captured_payment(order_id=order_id, free_ok=True)
    now = timezone.now()
    if not move_return(return_id, Return.Status.RECEIVED, received_at=now, decided_at=now, decided_by=user):
        raise ReturnNotReceivable(status=Return.objects.get(id=return_id).status)

    items = {item.id: item for item in lock_items(order_id=order_id)}
    for line in lines:
        line.condition = conditions[line.item.product_id]
        OrderItem.objects.filter(id=line.item_id).update(returned=F("returned") + line.quantity)
    ReturnLine.objects.bulk_update(lines, ["condition"])
    refund = refund_units(
        order=order,
        payment=payment,
        units=[(items[line.item_id], line.quantity) for line in lines],
        reason=Refund.Reason.RETURN,
        user=user,
    )
    if refund is not None:
        Return.objects.filter(id=return_id).update(refund=refund)
    by_condition = {condition: {} for condition in ReturnCondition.values}
    for line in lines:
        by_condition[line.condition][line.item.product_id] = line.quantity
    take_back_returned(
        restock=by_condition[ReturnCondition.RESTOCK],
        damaged=by_condition[ReturnCondition.DAMAGED],
        user=user,
        note=f"return {return_id} of order {order_id}",
    )
    record_event(
        aggregate_type="order",
        aggregate_id=order_id,
        event_type="ReturnReceived",
        data={
            "return_id": return_id,
            "order_id": order_id,
            "customer_id": order.customer_id,
            "lines": [
                {"sku": line.item.product_id, "quantity": line.quantity, "condition": line.condition} for line in lines
            ],
            "refund_id": refund.id if refund else None,
            "amount": refund.amount if refund else 0,
            "currency": order.currency,
        },
    )
    return Return.objects.select_related("refund").prefetch_related("lines__item").get(id=return_id)
