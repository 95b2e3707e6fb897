"""The email consumer (order confirmation, payment receipt, shipping,
cancellation, lines removed, return and refund notices) and the payments consumer (refunds submitted
to the provider; an authorized payment captured when its order ships, voided
when its order is cancelled before, or when it paid no order).

The payments consumer, not a Celery task, submits refunds: the event is in the
outbox with the refund, so no refund can be lost between the commit and a
broker; a provider outage is an outage (ProviderUnavailable: retried with
backoff, never dead-lettered); and the call's idempotency key makes a
redelivered event, or a retry after a crash, the same refund to the provider."""

from django.conf import settings
from django.core.mail import send_mail

from core.formatting import format_line, format_units
from core.money import format_money
from orders.models import Notification, Order, Payment
from orders.money import applied_payment, held_payment, is_held
from orders.selectors import order_tax_lines
from orders.services.erasure import forget_notification_addresses
from orders.services.payments import capture_payment, void_payment
from orders.services.refunds import submit_refund
from outbox.consumers import Event, register
from shop.handlers import NOT_THE_ORDERS_MONEY


def _money(amount: int, currency: str) -> str:
    return format_money(amount, currency)


def _notify(*, order_id: int | None, kind: str, subject: str, body: str) -> None:
    order = Order.objects.select_related("customer").filter(id=order_id).first() if order_id else None
    if order is None or not order.customer.email:
        return  # nobody to write to (an orphan payment, or no address on file)
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [order.customer.email])
    Notification.objects.create(order=order, kind=kind, to=order.customer.email, subject=subject)


def _gross(item: dict) -> int:
    """What the line was charged: an event from before tax has no `gross`, and its line total is it."""
    return item["gross"] if "gross" in item else item["quantity"] * item["unit_price"] - item.get("discount", 0)


def order_lines_text(data: dict) -> str:
    """The order's lines, shipping and tax as an e-mail prints them (OrderPaid's data)."""
    currency = data["currency"]
    lines = [
        f"  {format_units(item['quantity'], item['sku'], item['name'])}  {_money(_gross(item), currency)}"
        for item in data["items"]
    ]
    if shipping := data.get("shipping"):
        lines.append(f"  Shipping: {shipping['name']}  {_money(shipping['gross'], currency)}")
    lines.append(f"  Total  {_money(data['total'], currency)}")
    included = "incl." if data.get("prices_include_tax", True) else "plus"
    for tax in data.get("tax_lines", ()):
        if tax["amount"]:
            rate = f"{tax['rate'] / 100:g}%"
            lines.append(
                f"  {included} VAT {rate} on {_money(tax['base'], currency)}: {_money(tax['amount'], currency)}"
            )
    return "\n".join(lines)


@register("email", "OrderPaid")
def send_order_confirmation(event: Event) -> None:
    data = event.data
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.ORDER_CONFIRMED,
        subject=f"Order {data['order_id']} confirmed",
        body=f"Thank you! We received {_money(data['total'], data['currency'])}.\n\n{order_lines_text(data)}\n",
    )


@register("email", "OrderCancelled")
def send_cancellation_notice(event: Event) -> None:
    order_id = event.data["order_id"]
    _notify(
        order_id=order_id,
        kind=Notification.Kind.ORDER_CANCELLED,
        subject=f"Order {order_id} cancelled",
        body="Your order was cancelled"
        + (" because it was not paid in time." if event.data.get("reason") == "expired" else ".")
        + "\n",
    )


# Refunds the shopper hears of in another e-mail: a return's, removed lines'.
TOLD_ELSEWHERE = {"return", "lines_cancelled"}


@register("email", "RefundRequested")
def send_refund_notice(event: Event) -> None:
    data = event.data
    if data.get("attempt", 1) > 1 or data.get("reason") in TOLD_ELSEWHERE:
        return  # a retry (told the first time); a return's or removed lines' (told with their own e-mail)
    if data.get("reason") in NOT_THE_ORDERS_MONEY:  # a second payment, a late one: not a refund of the order
        _notify(
            order_id=data.get("order_id"),
            kind=Notification.Kind.REFUND_REQUESTED,
            subject=f"Your payment {data['payment_id']} is refunded",
            body=f"A payment of {_money(data['amount'], data['currency'])} did not pay order "
            f"{data.get('order_id')} (it was paid already, or no longer awaited payment): it is going back to you.\n",
        )
        return
    _notify(
        order_id=data.get("order_id"),
        kind=Notification.Kind.REFUND_REQUESTED,
        subject=f"Refund for order {data.get('order_id')}",
        body=f"We are refunding {_money(data['amount'], data['currency'])} to you.\n",
    )


@register("email", "OrderShipped")
def send_shipping_notice(event: Event) -> None:
    data = event.data
    address = data.get("shipping_address") or {}
    to = ", ".join(filter(None, [address.get("name"), address.get("city"), address.get("country")]))
    lines = "\n".join("  " + format_units(i["quantity"], i["sku"]) for i in data["items"])
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.ORDER_SHIPPED,
        subject=f"Order {data['order_id']} shipped",
        body=f"Your order is on its way{' to ' + to if to else ''}.\n\n{lines}\n",
    )


@register("email", "RefundCompleted")
def send_refund_completed(event: Event) -> None:
    data = event.data
    not_the_order = data.get("reason") in NOT_THE_ORDERS_MONEY
    _notify(
        order_id=data.get("order_id"),
        kind=Notification.Kind.REFUND_COMPLETED,
        subject=f"Your payment {data['payment_id']} is refunded"
        if not_the_order
        else f"Refund for order {data.get('order_id')} completed",
        body=f"{_money(data['amount'], data['currency'])} is back on your card.\n",
    )


@register("email", "OrderPaymentRequested")
def send_payment_request(event: Event) -> None:
    """Staff asked the shopper to pay again: the money held for the order lapsed."""
    data = event.data
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.PAYMENT_REQUESTED,
        subject=f"Please pay again for order {data['order_id']}",
        body=(
            f"The payment held for your order {data['order_id']} ({_money(data['total'], data['currency'])}) "
            "ended before the order shipped, so nothing was taken. Your items are still reserved: pay again "
            f"(POST /api/orders/{data['order_id']}/payment) before {data['expires_at']}.\n"
        ),
    )


@register("payments", "RefundRequested")
def submit_requested_refund(event: Event) -> None:
    submit_refund(refund_id=event.data["refund_id"])


@register("payments", "OrderShipped")
def capture_on_shipment(event: Event) -> None:
    """PAYMENT_CAPTURE=on_shipment: shipping captures before the goods leave
    (orders/services/shipping.py), so an order shipped today finds nothing held
    here; an OrderShipped of an order shipped before that rule still has its
    money taken."""
    if settings.PAYMENT_CAPTURE == "immediate":
        return  # the provider captures as it authorizes
    payment = held_payment(order_id=event.data["order_id"])
    if payment is not None:
        capture_payment(payment=payment)


@register("payments", "OrderCancelled")
def void_on_cancellation(event: Event) -> None:
    """A paid order cancelled before shipping: its payment, claimed for a void
    by the cancellation, is released at the provider."""
    payment = held_payment(order_id=event.data["order_id"])
    if payment is not None:
        void_payment(payment=payment)


@register("payments", "PaymentAuthorized")
def void_what_paid_no_order(event: Event) -> None:
    """An authorization that paid no order (it came after the expiry, for
    another amount, for no order): its money is released."""
    if event.data["applied"] or settings.PAYMENT_CAPTURE == "immediate":
        return  # immediate capture: the provider's capture follows, and is refunded then
    payment = Payment.objects.filter(provider_payment_id=event.data["payment_id"]).first()
    if is_held(payment):
        void_payment(payment=payment)


@register("email", "PaymentCaptured")
def send_payment_receipt(event: Event) -> None:
    data = event.data
    paid_by = applied_payment(order_id=data["order_id"]) if data.get("order_id") else None
    if paid_by is None or paid_by.provider_payment_id != data["payment_id"]:
        return  # no order's money (it is refunded)
    taken = _money(data.get("captured_amount", data["amount"]), data["currency"])
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.PAYMENT_RECEIPT,
        subject=f"Receipt for order {data['order_id']}",
        body=f"We have taken {taken} for your order {data['order_id']}.\n\n{receipt_text(data['order_id'])}\n",
    )


def receipt_text(order_id: int) -> str:
    """The order as charged now (lines less those removed, shipping, VAT per rate), for the receipt."""
    order = Order.objects.prefetch_related("items").get(id=order_id)
    items = [
        {
            "quantity": item.quantity - item.cancelled,
            "sku": item.product_id,
            "name": item.name,
            "gross": item.gross - item.price_of_units(first=0, count=item.cancelled),
        }
        for item in order.items.all()
        if item.quantity > item.cancelled
    ]
    return order_lines_text(
        {
            "items": items,
            "currency": order.currency,
            "shipping": order.shipping,
            "total": order.total_amount,
            "prices_include_tax": order.prices_include_tax,
            "tax_lines": order_tax_lines(order),
        }
    )


@register("email", "OrderLinesCancelled")
def send_lines_removed_notice(event: Event) -> None:
    data = event.data
    lines = "\n".join("  " + format_line(line, _money(line["amount"], data["currency"])) for line in data["lines"])
    if data.get("refund_id"):  # what the refund gives back: capped at what earlier refunds left of the capture
        money = f"{_money(data['refund_amount'], data['currency'])} is refunded to you"
    elif data.get("captured"):
        money = "Earlier refunds already gave back what was paid, so nothing more is refunded"
    else:
        money = f"{_money(data['amount'], data['currency'])} will not be charged"
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.LINES_CANCELLED,
        subject=f"Order {data['order_id']} changed",
        body=f"We removed from your order:\n{lines}\n\n{money}; the order now costs "
        f"{_money(data['total'], data['currency'])}.\n",
    )


@register("email", "ReturnApproved")
@register("email", "ReturnRejected")
def send_return_decision(event: Event) -> None:
    data = event.data
    approved = event.event_type == "ReturnApproved"
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.RETURN_DECIDED,
        subject=f"Your return for order {data['order_id']} is {'approved' if approved else 'declined'}",
        body="Please send the items back to us.\n" if approved else "We cannot accept this return.\n",
    )


@register("email", "ReturnReceived")
def send_return_received(event: Event) -> None:
    data = event.data
    lines = "\n".join("  " + format_units(line["quantity"], line["sku"]) for line in data["lines"])
    money = (
        f"{_money(data['amount'], data['currency'])} is on its way back to you."
        if data.get("refund_id")
        else "There was no money to give back."
    )
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.RETURN_RECEIVED,
        subject=f"We received your return for order {data['order_id']}",
        body=f"We received:\n{lines}\n\n{money}\n",
    )


@register("email", "CustomerErased")
def forget_erased_customer_addresses(event: Event) -> None:
    """The erasure replaced the address of every notification it found; one this
    consumer wrote meanwhile (it read the e-mail before the erasure committed)
    gets the placeholder here. Nothing is sent: the account has no e-mail now."""
    forget_notification_addresses(customer_id=event.data["customer_id"])
