"""Staff remove lines from a paid order before it ships (a unit out of stock in
the warehouse, a shopper who asked): the units go back on sale, the order's
total drops by what they cost, and the money follows. A payment only
authorized is captured later for the new total (the rest of the hold is
released with the capture); a payment captured already refunds them."""

from collections.abc import Mapping

from django.db import transaction
from django.db.models import F

from inventory.services import return_reserved_stock
from orders import money
from orders.exceptions import LinesNotRemovable, OrderNotFound, PaymentNotCaptured, SkuNotOnOrder
from orders.locks import lock_items, lock_order
from orders.models import Order, OrderItem, OrderStatus, Refund
from orders.services.cancellation import reopen_gate_lines, reserved_lines
from orders.services.refunds import ShippingBack, price_units, refund_priced_units
from outbox.services import record_event
from shop.models import Product


@transaction.atomic
def remove_order_lines(*, order_id: int, lines: Mapping[str, int], user=None) -> Order:
    """Take `lines` ({sku: units}) off a PAID order. The order is locked first
    (shipping waits, then finds the new lines), then its items; each line's
    `cancelled` grows by a conditional UPDATE within what it still has. Taking
    every unit is cancelling the order, refused here (LinesNotRemovable). A
    payment being captured or voided right now is refused (PaymentNotCaptured):
    the capture reads the total once claimed, so it must not move under it."""
    order = lock_order(order_id)
    if order is None:
        raise OrderNotFound()
    if order.status != OrderStatus.PAID:
        raise LinesNotRemovable("Only a paid order that has not shipped can lose lines.", status=order.status)
    items = {item.product_id: item for item in lock_items(order_id=order.id)}
    unknown = sorted(set(lines) - set(items))
    if unknown:
        raise SkuNotOnOrder(skus=unknown)
    if any(count <= 0 for count in lines.values()):
        raise LinesNotRemovable("Each line removes at least one unit.")
    left = sum(item.shipped_units - item.refunded for item in items.values()) - sum(lines.values())
    if left <= 0:
        raise LinesNotRemovable(remaining_units=left + sum(lines.values()))
    payment = money.applied_payment(order_id=order.id, lock=True)
    if money.is_settling(payment):
        raise PaymentNotCaptured("The order's payment is being captured or voided: try again in a moment.")

    priced = price_units((items[sku], count) for sku, count in sorted(lines.items()))
    for each in priced:
        removable = OrderItem.objects.filter(
            id=each.item.id, cancelled__lte=F("quantity") - F("in_returns") - F("refunded") - each.count
        )
        if not removable.update(cancelled=F("cancelled") + each.count):
            raise LinesNotRemovable(sku=each.item.product_id, removable=each.item.shipped_units - each.item.refunded)
    removed = {each.item.product_id: each.count for each in priced}
    shipping = _shipping_left_without_goods(order, items.values(), removed)
    amount = sum(each.amount for each in priced) + (shipping.amount if shipping else 0)
    tax = sum(each.tax for each in priced) + (shipping.tax if shipping else 0)
    dropped = {"shipping_amount": 0, "shipping": None} if shipping else {}
    Order.objects.filter(id=order.id).update(
        total_amount=F("total_amount") - amount, tax_amount=F("tax_amount") - tax, **dropped
    )
    return_reserved_stock(lines=removed)
    reopen_gate_lines(customer_id=order.customer_id, lines=removed)

    refund = None
    if money.is_taken(payment):
        reason = Refund.Reason.LINES_CANCELLED
        refund = refund_priced_units(
            payment=payment, order=order, reason=reason, priced=priced, user=user, shipping=shipping
        )
    order.refresh_from_db()
    still = reserved_lines(order_ids=[order.id])
    record_event(
        aggregate_type="order",
        aggregate_id=order.id,
        event_type="OrderLinesCancelled",
        data={
            "order_id": order.id,
            "customer_id": order.customer_id,
            "lines": [each.as_line() for each in priced] + ([shipping.as_line()] if shipping else []),
            "amount": amount,
            "tax": tax,
            "currency": order.currency,
            "total": order.total_amount,
            "total_tax": order.tax_amount,
            "refund_id": refund.id if refund else None,
            "refund_amount": refund.amount if refund else 0,
            "captured": money.is_taken(payment),
            "items": [{"sku": sku, "quantity": units} for sku, units in sorted(still.items())],
        },
    )
    return order


def _shipping_left_without_goods(order: Order, items, removed: Mapping[str, int]) -> ShippingBack | None:
    """The order's shipping, when the units left weigh nothing: nothing ships, so
    its charge goes with the last of the goods that did."""
    if not order.shipping_amount:
        return None
    left = [item.product_id for item in items if item.shipped_units - item.refunded - removed.get(item.product_id, 0)]
    if Product.objects.filter(sku__in=left, weight_grams__gt=0).exists():
        return None
    return ShippingBack.of(order)
