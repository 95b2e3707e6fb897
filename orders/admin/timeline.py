"""An order's events and payments as its page shows them, oldest first."""

from django.contrib import admin
from django.utils.html import format_html_join

from core.money import format_money
from orders.admin.common import _at, _units
from outbox.models import OutboxEvent


def event_summary(event: OutboxEvent, currency: str) -> str:
    """An order's event as staff read it in the timeline: its type and what its
    payload says in a few words ("RefundRequested €12.99 (return)"). Payloads are
    read with .get(): events written before a field existed still show."""
    data = event.payload

    def money(key: str) -> str:
        amount = data.get(key)
        return "" if amount is None else format_money(amount, data.get("currency") or currency)

    def returned() -> str:
        return f"return {data['return_id']}" if data.get("return_id") else ""

    match event.event_type:
        case "OrderCreated":
            parts = [_units(data.get("items")), money("total")]
        case "OrderRejected":
            parts = [_units(data.get("items")), data.get("reason")]
        case "OrderPaid":
            parts = [money("total"), data.get("payment_id")]
        case "OrderShipped":
            parts = [_units(data.get("items"))]
        case "OrderCancelled":
            parts = [data.get("reason"), "was paid" if data.get("was_paid") else ""]
        case "OrderLinesCancelled":
            total = f"total now {money('total')}" if "total" in data else ""
            parts = [_units(data.get("lines")), money("amount"), total]
        case "PaymentAuthorized":
            refused = "" if data.get("applied", True) else f"not applied: {data.get('reason') or '?'}"
            parts = [money("amount"), data.get("payment_id"), refused]
        case "PaymentCaptured":
            parts = [money("captured_amount") or money("amount"), data.get("payment_id")]
        case "PaymentVoided":
            parts = [money("amount"), data.get("payment_id")]
        case "PaymentCaptureRefused" | "OrderPaymentLapsed":
            parts = [data.get("payment_id"), data.get("reason")]
        case "OrderPaymentRequested":
            parts = [money("total"), f"by {data['expires_at']}" if data.get("expires_at") else ""]
        case "RefundRequested" | "RefundCompleted":
            attempt = f"attempt {data['attempt']}" if data.get("attempt") else ""
            parts = [f"{money('amount')} ({data.get('reason')})", _units(data.get("lines")), attempt]
        case "ReturnRequested":
            parts = [_units(data.get("lines")), f"“{data['reason']}”" if data.get("reason") else "", returned()]
        case "ReturnReceived":
            parts = [_units(data.get("lines")), f"{money('amount')} refunded" if data.get("amount") else "", returned()]
        case "ReturnApproved" | "ReturnRejected":
            parts = [returned()]
        case _:
            parts = []
    return " ".join(filter(None, [event.event_type, ", ".join(filter(None, parts))]))


class OrderTimeline:
    @admin.display(description="timeline")
    def events(self, order):
        """The order's outbox events, oldest first: when, what (in a few words), and
        whether the relay published it yet."""
        events = OutboxEvent.objects.filter(aggregate_type="order", aggregate_id=str(order.id)).order_by("id")
        return (
            format_html_join(
                "\n",
                '<div class="order-event">{} &middot; {} &middot; {}</div>',
                (
                    (
                        _at(e.created_at),
                        event_summary(e, order.currency),
                        f"published {_at(e.published_at)}" if e.published_at else f"waiting ({e.attempts} attempts)",
                    )
                    for e in events
                ),
            )
            or "-"
        )

    @admin.display(description="timeline")
    def payment_timeline(self, order):
        def moments(payment):
            stamps = [
                ("authorized", payment.authorized_at),
                ("captured", payment.captured_at),
                ("voided", payment.voided_at),
            ]
            for refund in payment.refunds.all():
                money = format_money(refund.amount, refund.currency)
                asked = f"refund of {money} ({refund.get_reason_display()}, {refund.get_status_display()}) requested"
                stamps += [(asked, refund.created_at), (f"refund of {money} completed", refund.completed_at)]
            return format_html_join("", "<li>{} {}</li>", ((what, _at(when)) for what, when in stamps if when))

        payments = order.payments.prefetch_related("refunds").order_by("id")
        return (
            format_html_join(
                "\n",
                "<div><strong>{}</strong> &middot; {} &middot; {} &middot; {}<ul>{}</ul></div>",
                (
                    (
                        p.provider_payment_id,
                        format_money(p.amount, p.currency),
                        p.get_status_display(),
                        p.get_outcome_display(),
                        moments(p),
                    )
                    for p in payments
                ),
            )
            or "-"
        )
