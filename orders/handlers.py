"""The email consumer (order confirmation, shipping, cancellation and refund
notices) and the payments consumer (refunds submitted to the provider).

The payments consumer, not a Celery task, submits refunds: the event is in the
outbox with the refund, so no refund can be lost between the commit and a
broker; a provider outage is an outage (ProviderUnavailable: retried with
backoff, never dead-lettered); and the call's idempotency key makes a
redelivered event, or a retry after a crash, the same refund to the provider."""

from django.conf import settings
from django.core.mail import send_mail

from orders.models import Notification, Order
from orders.services.refunds import submit_refund
from outbox.consumers import Event, register


def _money(amount: int, currency: str) -> str:
    return f"{amount / 100:.2f} {currency}"


def _notify(*, order_id: int | None, kind: str, subject: str, body: str) -> None:
    order = Order.objects.select_related("customer").filter(id=order_id).first() if order_id else None
    if order is None or not order.customer.email:
        return  # nobody to write to (an orphan payment, or no address on file)
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [order.customer.email])
    Notification.objects.create(order=order, kind=kind, to=order.customer.email, subject=subject)


@register("email", "OrderPaid")
def send_order_confirmation(event: Event) -> None:
    data = event.data
    lines = "\n".join(f"  {i['quantity']} x {i['name']} ({i['sku']})" for i in data["items"])
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.ORDER_CONFIRMED,
        subject=f"Order {data['order_id']} confirmed",
        body=f"Thank you! We received {_money(data['total'], data['currency'])}.\n\n{lines}\n",
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


@register("email", "RefundRequested")
def send_refund_notice(event: Event) -> None:
    data = event.data
    if data.get("attempt", 1) > 1:
        return  # staff retried a failed refund: the shopper was told the first time
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
    lines = "\n".join(f"  {i['quantity']} x {i['sku']}" for i in data["items"])
    _notify(
        order_id=data["order_id"],
        kind=Notification.Kind.ORDER_SHIPPED,
        subject=f"Order {data['order_id']} shipped",
        body=f"Your order is on its way{' to ' + to if to else ''}.\n\n{lines}\n",
    )


@register("email", "RefundCompleted")
def send_refund_completed(event: Event) -> None:
    data = event.data
    _notify(
        order_id=data.get("order_id"),
        kind=Notification.Kind.REFUND_COMPLETED,
        subject=f"Refund for order {data.get('order_id')} completed",
        body=f"{_money(data['amount'], data['currency'])} is back on your card.\n",
    )


@register("payments", "RefundRequested")
def submit_requested_refund(event: Event) -> None:
    submit_refund(refund_id=event.data["refund_id"])
