"""The order page: its inlines, the staff forms' pages and the actions on selected orders."""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect, StreamingHttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnlyInline
from core.money import format_money
from inventory.models import Shipment
from orders import money
from orders.admin.common import (
    PaymentAmountsShown,
    PerOrderAction,
    RefundShown,
    ReturnShown,
    _link,
    service_form_page,
)
from orders.admin.forms import GoodwillRefundForm, RemoveLinesForm
from orders.admin.payments import PaymentActions
from orders.admin.timeline import OrderTimeline
from orders.exports import csv_lines
from orders.models import Order, OrderItem, OrderStatus, Payment, Refund, Return
from orders.selectors import order_tax_lines
from orders.services import cancel_pending_order, mark_order_shipped, refund_paid_order
from orders.services.authorizations import request_payment_again


class OrderItemInline(ReadOnlyInline):
    model = OrderItem
    fields = [
        "product",
        "name",
        "quantity",
        "price",
        "discount_off",
        "tax_shown",
        "gross_shown",
        "cancelled",
        "shipped",
        "in_returns",
        "returned",
        "refunded",
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("order")  # the currency, without a query per line

    @admin.display(description="unit price")
    def price(self, item):
        return format_money(item.unit_price, item.order.currency)

    @admin.display(description="discount")
    def discount_off(self, item):
        return format_money(item.discount, item.order.currency)

    @admin.display(description="tax")
    def tax_shown(self, item):
        return f"{format_money(item.tax, item.order.currency)} ({item.tax_rate / 100:g}%)"

    @admin.display(description="charged (gross)")
    def gross_shown(self, item):
        return format_money(item.gross, item.order.currency)

    @admin.display(description="shipped")
    def shipped(self, item):
        return item.shipped_units if item.order.shipped_at else "-"


class PaymentInline(PaymentAmountsShown, ReadOnlyInline):
    model = Payment
    fields = [
        "provider_payment_id",
        "amount_shown",
        "captured_shown",
        "refunded_shown",
        "status",
        "outcome",
        "received_at",
        "authorization_ends_at",
    ]


class RefundInline(RefundShown, ReadOnlyInline):
    model = Refund
    fields = [
        "payment",
        "amount_shown",
        "reason",
        "note",
        "lines_shown",
        "status",
        "failure_reason",
        "created_at",
        "completed_at",
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("payment")


class ReturnInline(ReturnShown, ReadOnlyInline):
    model = Return
    fields = ["return_link", "status", "lines_shown", "reason", "created_at", "received_at", "refund_shown"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("refund").prefetch_related("lines__item")

    def has_view_permission(self, request, obj=None):  # returns are part of the order (no grant of their own)
        return request.user.has_perm("orders.view_order")

    @admin.display(description="return")
    def return_link(self, returned):
        return _link("return", returned.id, f"Return {returned.id}")


@admin.register(Order)
class OrderAdmin(PerOrderAction, PaymentActions, OrderTimeline, admin.ModelAdmin):
    list_display = ["id", "customer", "status", "total", "created_at", "expires_at", "paid_at"]
    list_filter = ["status", "created_at"]
    search_fields = ["=id", "customer__username", "customer__email", "items__product__sku"]
    list_select_related = ["customer"]
    # An order is a snapshot of what was bought, for how much, shipped where: staff
    # change it only through the actions and the forms (services), never by editing its fields.
    readonly_fields = [
        "customer",
        "idempotency_key",
        "request_hash",
        "status",
        "total",
        "shipping_shown",
        "tax_shown",
        "created_at",
        "expires_at",
        "paid_at",
        "authorization_ends",
        "shipped_at",
        "cancelled_at",
        "rejection_reason",
        "ship_to",
        "shipment_status",
        "payment_timeline",
        "events",
    ]
    fieldsets = [
        (None, {"fields": readonly_fields[:-2]}),
        ("Payments", {"fields": ["payment_timeline"]}),
        ("Events", {"fields": ["events"]}),
    ]
    inlines = [OrderItemInline, PaymentInline, RefundInline, ReturnInline]
    actions = [
        "cancel_pending",
        "refund_paid",
        "mark_shipped",
        "capture_payments",
        "void_payments",
        "request_payment",
        "export_csv",
    ]
    date_hierarchy = "created_at"
    show_full_result_count = False
    change_form_template = "admin/orders/change_form_with_tools.html"

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/goodwill-refund/", view(self.goodwill_refund_view), name="orders_order_goodwill"),
            path("<path:object_id>/remove-lines/", view(self.remove_lines_view), name="orders_order_remove_lines"),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        tools = []
        if obj is not None and self.has_change_permission(request, obj):
            if obj.status in (OrderStatus.PAID, OrderStatus.SHIPPED):
                tools.append(("Refund an amount (goodwill)", reverse("admin:orders_order_goodwill", args=[obj.pk])))
            if obj.status == OrderStatus.PAID:
                tools.append(("Remove lines", reverse("admin:orders_order_remove_lines", args=[obj.pk])))
        context["staff_tools"] = tools
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _order_to_change(self, request, object_id) -> Order:
        order = self.get_object(request, unquote(object_id))
        if order is None:
            raise Http404("No such order")
        if not self.has_change_permission(request, order):
            raise PermissionDenied
        return order

    def goodwill_refund_view(self, request, object_id):
        order = self._order_to_change(request, object_id)
        payment = money.applied_payment(order_id=order.id)
        if money.is_taken(payment):
            left = format_money(money.refundable(payment_id=payment.id), payment.currency)
            held = (
                f"Payment {payment.provider_payment_id}: {format_money(payment.captured_amount, payment.currency)} "
                f"captured, {format_money(payment.refunded_amount, payment.currency)} refunded or being refunded: "
                f"up to {left} can be given back."
            )
        else:
            held = "Its payment is not captured: there is nothing to give back yet."
        form = GoodwillRefundForm(request.POST if request.method == "POST" else None, order=order)
        return service_form_page(
            self,
            request,
            form=form,
            subject=f"Order {order.id}",
            back=self._change_url(order),
            title=f"Refund an amount of order {order.id} (goodwill)",
            submit="Refund",
            intro=[
                f"Total {format_money(order.total_amount, order.currency)}, {order.get_status_display()}.",
                held,
                "The money goes back without a return: no unit of the order changes.",
            ],
        )

    def remove_lines_view(self, request, object_id):
        order = self._order_to_change(request, object_id)
        if order.status != OrderStatus.PAID:
            self.message_user(
                request,
                f"Order {order.id}: only a paid order that has not shipped can lose lines; "
                f"it is {order.get_status_display()}.",
                messages.WARNING,
            )
            return HttpResponseRedirect(self._change_url(order))
        form = RemoveLinesForm(request.POST if request.method == "POST" else None, order=order)
        return service_form_page(
            self,
            request,
            form=form,
            subject=f"Order {order.id}",
            back=self._change_url(order),
            title=f"Remove lines of order {order.id}",
            submit="Remove",
            intro=[
                f"Total {format_money(order.total_amount, order.currency)}. The units removed go back on sale "
                "and the total drops by what they cost: a payment only authorized is captured for the new "
                "total, a captured one refunds them. Removing every unit is cancelling the order: use the "
                "actions instead."
            ],
        )

    @staticmethod
    def _change_url(order: Order) -> str:
        return reverse("admin:orders_order_change", args=[order.pk])

    @admin.display(description="total", ordering="total_amount")
    def total(self, order):
        return format_money(order.total_amount, order.currency)

    @admin.display(description="money held until")
    def authorization_ends(self, order):
        """When the card issuer releases the money held for the order unless it is
        captured first (the hourly job captures it a day before)."""
        payment = money.held_payment(order_id=order.pk)
        if payment is None or payment.authorization_ends_at is None:
            return "-"
        left = payment.authorization_ends_at - timezone.now()
        when = f"{payment.authorization_ends_at:%Y-%m-%d %H:%M} UTC"
        return f"{when} (ended)" if left.total_seconds() <= 0 else f"{when} (in {left.days} d {left.seconds // 3600} h)"

    @admin.display(description="shipping")
    def shipping_shown(self, order):
        shipping = order.shipping
        if not shipping:
            return "-"
        off = f", {format_money(shipping['discount'], order.currency)} off" if shipping["discount"] else ""
        return f"{shipping['name']} ({shipping['code']}): {format_money(order.shipping_amount, order.currency)}{off}"

    @admin.display(description="tax")
    def tax_shown(self, order):
        """The order's tax per rate as charged now, on the prices' basis."""
        currency = order.currency
        lines = [
            (f"{line['rate'] / 100:g}%", format_money(line["base"], currency), format_money(line["amount"], currency))
            for line in order_tax_lines(order)
        ]
        basis = "included in the prices" if order.prices_include_tax else "added to the prices"
        head = f"{format_money(order.tax_amount, order.currency)} ({basis}; {order.tax_country or '-'})"
        return format_html("<div>{}</div>{}", head, format_html_join("", "<div>{} on {}: {}</div>", lines))

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

    def has_export_permission(self, request):
        return request.user.has_perm("orders.export_order")

    @admin.action(
        description="Cancel selected pending orders or orders whose payment lapsed (stock returned)",
        permissions=["change"],
    )
    def cancel_pending(self, request, queryset):
        self._each(
            request,
            queryset,
            (OrderStatus.PENDING_PAYMENT, OrderStatus.PAYMENT_LAPSED),
            lambda order: cancel_pending_order(order_id=order.id),
            "cancelled, stock returned",
        )

    @admin.action(description="Refund selected paid orders (stock returned)", permissions=["change"])
    def refund_paid(self, request, queryset):
        self._each(
            request,
            queryset,
            OrderStatus.PAID,
            lambda order: refund_paid_order(order_id=order.id, user=request.user),
            "refund requested, stock returned",
        )

    @admin.action(
        description="Export selected orders as CSV (all matching ones: select them all)", permissions=["export"]
    )
    def export_csv(self, request, queryset):
        response = StreamingHttpResponse(csv_lines(queryset), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="orders-{timezone.now():%Y%m%d-%H%M%S}.csv"'
        return response

    @admin.action(description="Ask the shopper to pay again (orders whose payment lapsed)", permissions=["change"])
    def request_payment(self, request, queryset):
        self._each(
            request,
            queryset,
            OrderStatus.PAYMENT_LAPSED,
            lambda order: request_payment_again(order_id=order.id),
            "awaiting payment again, the shopper is e-mailed",
        )

    @admin.action(
        description="Mark selected paid orders shipped (their payment captured first; reserved -> shipped)",
        permissions=["change"],
    )
    def mark_shipped(self, request, queryset):
        self._each(
            request,
            queryset,
            OrderStatus.PAID,
            lambda order: mark_order_shipped(order_id=order.id),
            "shipped",
        )
