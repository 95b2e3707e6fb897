from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import StreamingHttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html_join

from core.admin import ReadOnlyAdmin, ReadOnlyInline
from core.exceptions import DomainError
from core.money import format_money
from inventory.models import Shipment
from orders.exports import csv_lines
from orders.models import CAPTURED_STATUSES, Notification, Order, OrderItem, OrderStatus, Payment, Refund
from orders.provider import ProviderRefused, ProviderUnavailable
from orders.services import cancel_pending_order, mark_order_shipped, refund_paid_order
from orders.services.payments import authorized_payment, capture_payment, void_payment
from orders.services.refunds import retry_refund
from outbox.models import OutboxEvent


def _at(moment) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S}"


class AmountShown:
    """A payment's or a refund's amount as money, in its own currency: for lists,
    inlines and view pages, in place of the `amount` and `currency` fields."""

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, record):
        return format_money(record.amount, record.currency)


def fields_shown(model) -> list[str]:
    """Every field of a payment or a refund, as its view page shows them."""
    names = [field.name for field in model._meta.fields if field.name != "currency"]
    return ["amount_shown" if name == "amount" else name for name in names]


class OrderItemInline(ReadOnlyInline):
    model = OrderItem
    fields = ["product", "name", "quantity", "price", "discount_off", "line_total"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("order")  # the currency, without a query per line

    @admin.display(description="unit price")
    def price(self, item):
        return format_money(item.unit_price, item.order.currency)

    @admin.display(description="discount")
    def discount_off(self, item):
        return format_money(item.discount, item.order.currency)

    @admin.display(description="line total")
    def line_total(self, item):
        return format_money(item.line_total, item.order.currency)


class PaymentInline(AmountShown, ReadOnlyInline):
    model = Payment
    fields = ["provider_payment_id", "amount_shown", "status", "outcome", "received_at"]


class RefundInline(AmountShown, ReadOnlyInline):
    model = Refund
    fields = ["payment", "amount_shown", "reason", "status", "failure_reason", "created_at", "completed_at"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "status", "total", "created_at", "expires_at", "paid_at"]
    list_filter = ["status", "created_at"]
    search_fields = ["=id", "customer__username", "customer__email", "items__product__sku"]
    list_select_related = ["customer"]
    # An order is a snapshot of what was bought, for how much, shipped where: staff
    # change it only through the actions (services), never by editing its fields.
    readonly_fields = [
        "customer", "idempotency_key", "request_hash", "status", "total",
        "created_at", "expires_at", "paid_at", "shipped_at", "cancelled_at", "rejection_reason", "ship_to",
        "shipment_status", "events", "payment_timeline",
    ]
    fieldsets = [(None, {"fields": readonly_fields[:-1]}), ("Payments", {"fields": ["payment_timeline"]})]
    inlines = [OrderItemInline, PaymentInline, RefundInline]
    actions = ["cancel_pending", "refund_paid", "mark_shipped", "capture_payments", "void_payments", "export_csv"]
    date_hierarchy = "created_at"
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="total", ordering="total_amount")
    def total(self, order):
        return format_money(order.total_amount, order.currency)

    @admin.display(description="ship to")
    def ship_to(self, order):
        """The address snapshot as a label reads, one line each; blank lines left out."""
        a = order.shipping_address
        if not a:
            return "-"
        town = " ".join(filter(None, [a.get("postal_code"), a.get("city")]))
        lines = [a.get("name"), a.get("line1"), a.get("line2"), town, a.get("country"), a.get("phone")]
        return format_html_join("\n", "<div>{}</div>", ((line,) for line in lines if line))

    @admin.display(description="shipment")
    def shipment_status(self, order):
        shipment = Shipment.objects.filter(order_id=order.pk).first()
        return f"{shipment.status} (requested {shipment.requested_at:%Y-%m-%d %H:%M})" if shipment else "-"

    @admin.display(description="outbox events")
    def events(self, order):
        events = OutboxEvent.objects.filter(aggregate_type="order", aggregate_id=str(order.id)).order_by("id")
        return format_html_join(
            "\n",
            "<div>{} &middot; {} &middot; {}</div>",
            (
                (e.event_type, e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                 f"published {e.published_at:%H:%M:%S}" if e.published_at else f"waiting ({e.attempts} attempts)")
                for e in events
            ),
        ) or "-"

    @admin.display(description="timeline")
    def payment_timeline(self, order):
        def moments(payment):
            stamps = [("authorized", payment.authorized_at), ("captured", payment.captured_at),
                      ("voided", payment.voided_at)]  # fmt: skip
            for refund in payment.refunds.all():
                money = format_money(refund.amount, refund.currency)
                asked = f"refund of {money} ({refund.get_reason_display()}, {refund.get_status_display()}) requested"
                stamps += [(asked, refund.created_at), (f"refund of {money} completed", refund.completed_at)]
            return format_html_join("", "<li>{} {}</li>", ((what, _at(when)) for what, when in stamps if when))

        payments = order.payments.prefetch_related("refunds").order_by("id")
        return format_html_join(
            "\n",
            "<div><strong>{}</strong> &middot; {} &middot; {} &middot; {}<ul>{}</ul></div>",
            (
                (p.provider_payment_id, format_money(p.amount, p.currency), p.get_status_display(),
                 p.get_outcome_display(), moments(p))
                for p in payments
            ),
        ) or "-"

    def _each(self, request, queryset, wanted: str, service, done: str):
        for order in queryset:
            if order.status != wanted:
                self.message_user(request, f"Order {order.id}: skipped, it is {order.status}.", messages.WARNING)
                continue
            try:
                changed = service(order)
            except DomainError as error:
                self.message_user(request, f"Order {order.id}: {error.message}", messages.ERROR)
                continue
            if changed is False:
                self.message_user(request, f"Order {order.id}: skipped, its status changed.", messages.WARNING)
            else:
                self.message_user(request, f"Order {order.id}: {done}.", messages.SUCCESS)

    def has_export_permission(self, request):
        return request.user.has_perm("orders.export_order")

    @admin.action(description="Cancel selected pending orders (stock returned)", permissions=["change"])
    def cancel_pending(self, request, queryset):
        self._each(
            request, queryset, OrderStatus.PENDING_PAYMENT,
            lambda order: cancel_pending_order(order_id=order.id), "cancelled, stock returned",
        )

    @admin.action(description="Refund selected paid orders (stock returned)", permissions=["change"])
    def refund_paid(self, request, queryset):
        self._each(
            request, queryset, OrderStatus.PAID,
            lambda order: refund_paid_order(order_id=order.id, user=request.user), "refund requested, stock returned",
        )

    def _confirmation(self, request, queryset, action: str, question: str):
        """Django's intermediate page (as for the delete action): the orders and
        the money each holds, and a Confirm button posting back with post=yes."""
        rows = []
        for order in queryset:
            payment = authorized_payment(order_id=order.id)
            held = f"{payment.provider_payment_id} ({payment.get_status_display()})" if payment else "no money held"
            rows.append((order.id, order.status, format_money(order.total_amount, order.currency), held))
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": question, "rows": rows,
            "action": action, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }  # fmt: skip
        return TemplateResponse(request, "admin/orders/order/payment_action_confirmation.html", context)

    @admin.action(description="Capture the payment of selected paid orders", permissions=["change"])
    def capture_payments(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirmation(request, queryset, "capture_payments", "Capture the payment of these orders?")
        for order in queryset:
            if order.status not in (OrderStatus.PAID, OrderStatus.SHIPPED):
                self.message_user(request, f"Order {order.id}: skipped, it is {order.status}.", messages.WARNING)
                continue
            payment = authorized_payment(order_id=order.id)
            try:
                captured = payment is not None and capture_payment(payment=payment)
            except ProviderUnavailable:
                self.message_user(request, f"Order {order.id}: the payment provider is unavailable, nothing "
                                  "captured yet: try again.", messages.WARNING)  # fmt: skip
            except ProviderRefused as error:
                self.message_user(request, f"Order {order.id}: {error}", messages.ERROR)
            else:
                if captured:
                    money = format_money(payment.amount, payment.currency)
                    self.message_user(request, f"Order {order.id}: captured {money}.", messages.SUCCESS)
                else:
                    self.message_user(request, f"Order {order.id}: nothing to capture.", messages.WARNING)

    @admin.action(description="Void the payment of selected paid orders (cancels them)", permissions=["change"])
    def void_payments(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirmation(
                request, queryset, "void_payments", "Cancel these orders and release the money held for them?"
            )
        for order in queryset:
            if order.status != OrderStatus.PAID:
                self.message_user(request, f"Order {order.id}: skipped, it is {order.status}.", messages.WARNING)
                continue
            # Cancels only if its payment is still just authorized, claiming it for the void.
            if not cancel_pending_order(order_id=order.id, reason="cancelled_by_staff"):
                taken = [Payment.Status.CAPTURING, *CAPTURED_STATUSES]
                captured = Payment.objects.filter(order_id=order.id, status__in=taken).exists()
                why = "captured: refund it instead" if captured else "skipped, its status changed"
                self.message_user(request, f"Order {order.id}: {why}.", messages.WARNING)
                continue
            payment = authorized_payment(order_id=order.id)  # the one just claimed (VOIDING)
            try:
                if payment is not None:
                    void_payment(payment=payment)
            except ProviderUnavailable:
                self.message_user(request, f"Order {order.id}: cancelled, stock returned; the payment provider is "
                                  "unavailable, the payments consumer will void the payment when it is back.",
                                  messages.WARNING)  # fmt: skip
            except ProviderRefused as error:
                self.message_user(request, f"Order {order.id}: cancelled, stock returned; {error}", messages.ERROR)
            else:
                self.message_user(request, f"Order {order.id}: cancelled, stock returned, payment voided.",
                                  messages.SUCCESS)  # fmt: skip

    @admin.action(
        description="Export selected orders as CSV (all matching ones: select them all)", permissions=["export"]
    )
    def export_csv(self, request, queryset):
        response = StreamingHttpResponse(csv_lines(queryset), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="orders-{timezone.now():%Y%m%d-%H%M%S}.csv"'
        return response

    @admin.action(description="Mark selected paid orders shipped (reserved -> shipped)", permissions=["change"])
    def mark_shipped(self, request, queryset):
        self._each(
            request, queryset, OrderStatus.PAID,
            lambda order: mark_order_shipped(order_id=order.id), "shipped",
        )


@admin.register(Payment)
class PaymentAdmin(AmountShown, ReadOnlyAdmin):
    list_display = ["provider_payment_id", "order_id", "amount_shown", "status", "outcome", "received_at"]
    list_filter = ["status", "outcome"]
    search_fields = ["provider_payment_id", "=order__id"]
    fields = readonly_fields = fields_shown(Payment)


@admin.register(Refund)
class RefundAdmin(AmountShown, ReadOnlyAdmin):
    list_display = [
        "id", "order_id", "payment", "amount_shown", "reason", "status", "failure_reason", "attempt",
        "created_at", "completed_at",
    ]  # fmt: skip
    list_filter = ["status", "reason"]
    list_select_related = ["payment"]
    fields = readonly_fields = fields_shown(Refund)
    actions = ["retry"]

    def has_change_permission(self, request, obj=None):  # for the action; the form stays read-only
        return request.user.has_perm("orders.change_order")

    @admin.action(description="Retry selected failed refunds (a new attempt at the provider)", permissions=["change"])
    def retry(self, request, queryset):
        retried = sum(retry_refund(refund_id=refund.id) for refund in queryset.filter(status=Refund.Status.FAILED))
        self.message_user(request, f"{retried} refund(s) requested again; {queryset.count() - retried} not failed")


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["order_id", "kind", "to", "subject", "sent_at"]
    list_filter = ["kind"]
    search_fields = ["=order__id", "to"]
