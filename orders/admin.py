from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnlyAdmin, ReadOnlyInline
from core.exceptions import DomainError
from core.money import format_money, minor_units_help
from inventory.models import Shipment
from orders.exports import csv_lines
from orders.models import (
    CAPTURED_STATUSES,
    Notification,
    Order,
    OrderItem,
    OrderStatus,
    Payment,
    Refund,
    Return,
    ReturnCondition,
)
from orders.provider import ProviderRefused, ProviderUnavailable
from orders.services import (
    approve_return,
    cancel_pending_order,
    mark_order_shipped,
    receive_return,
    refund_goodwill,
    refund_paid_order,
    reject_return,
    remove_order_lines,
)
from orders.services.payments import authorized_payment, capture_payment, void_payment
from orders.services.refunds import retry_refund
from outbox.models import OutboxEvent
from shop.models import MAX_PRICE


def _at(moment) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S}"


def _units(lines) -> str:
    """Lines of an event or a refund ([{"sku", "quantity", ...}]) as "2 x A, 1 x B"; a
    received line says its condition ("1 x A restock")."""
    return ", ".join(
        " ".join(filter(None, [f"{line.get('quantity')} x {line.get('sku')}", line.get("condition")]))
        for line in lines or []
    )


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


def return_lines(returned: Return) -> str:
    """A return's lines as "2 x A (restock), 1 x B" (its lines and their items prefetched)."""
    return ", ".join(
        f"{line.quantity} x {line.item.product_id}" + (f" ({line.condition})" if line.condition else "")
        for line in returned.lines.all()
    )


def refusal(error: DomainError, currency: str) -> str:
    """A service's refusal as staff read it: its message, and what is left when it says."""
    details = error.details
    if "refundable" in details:
        return f"{error.message} {format_money(details['refundable'], currency)} can still be refunded."
    if "removable" in details:
        return f"{error.message} {details.get('sku')}: {details['removable']} unit(s) can still be removed."
    return error.message


def service_form_page(model_admin, request, *, form, subject: str, back: str, title: str, intro=(), submit: str):
    """A page of one staff form whose save(user=...) calls a service and says what
    it did: on success a message and back to `back`; a refusal (DomainError) is an
    error message above the form again, never a 500."""
    if request.method == "POST" and form.is_valid():
        try:
            done = form.save(user=request.user)
        except DomainError as error:
            model_admin.message_user(request, f"{subject}: {refusal(error, form.currency)}", messages.ERROR)
        else:
            model_admin.message_user(request, f"{subject}: {done}", messages.SUCCESS)
            return HttpResponseRedirect(back)
    context = {
        **model_admin.admin_site.each_context(request), "opts": model_admin.opts, "title": title,
        "subject": subject, "back": back, "intro": intro, "form": form, "submit": submit,
    }  # fmt: skip
    return TemplateResponse(request, "admin/orders/staff_form.html", context)


# --- the forms staff act through: each calls one service -------------------------------------------------


class GoodwillRefundForm(forms.Form):
    amount = forms.IntegerField(min_value=1, max_value=MAX_PRICE)
    note = forms.CharField(max_length=200, help_text="Why the money goes back (kept with the refund).")

    def __init__(self, *args, order: Order, **kwargs):
        super().__init__(*args, **kwargs)
        self.order, self.currency = order, order.currency
        self.fields["amount"].help_text = f"In {minor_units_help(order.currency)}."

    def save(self, *, user) -> str:
        refund = refund_goodwill(order_id=self.order.id, amount=self.cleaned_data["amount"],
                                 note=self.cleaned_data["note"], user=user)  # fmt: skip
        return f"goodwill refund of {format_money(refund.amount, refund.currency)} requested."


class RemoveLinesForm(forms.Form):
    """Units to take off each line of a paid order (0: none); what may go is the service's to say."""

    def __init__(self, *args, order: Order, **kwargs):
        super().__init__(*args, **kwargs)
        self.order, self.currency = order, order.currency
        self.items = list(order.items.order_by("id"))
        for item in self.items:
            price = format_money(item.unit_price, order.currency)
            self.fields[f"units_{item.id}"] = forms.IntegerField(
                label=f"{item.product_id}: {item.name}", min_value=0, max_value=item.quantity, initial=0,
                required=False,  # blank: none of the line
                help_text=f"{item.quantity} ordered at {price}; {item.cancelled} removed and {item.refunded} "
                          "refunded already.",
            )  # fmt: skip

    def lines(self) -> dict[str, int]:
        return {item.product_id: self.cleaned_data[f"units_{item.id}"] for item in self.items
                if self.cleaned_data.get(f"units_{item.id}")}  # fmt: skip

    def clean(self):
        data = super().clean()
        if not self.errors and not self.lines():
            raise forms.ValidationError("Give the units to remove of at least one line.")
        return data

    def save(self, *, user) -> str:
        lines, before = self.lines(), self.order.total_amount
        last_refund = self.order.refunds.order_by("-id").values_list("id", flat=True).first() or 0
        order = remove_order_lines(order_id=self.order.id, lines=lines, user=user)
        removed = _units({"sku": sku, "quantity": units} for sku, units in sorted(lines.items()))
        said = (f"removed {removed} ({format_money(before - order.total_amount, order.currency)} off), "
                f"the total is now {format_money(order.total_amount, order.currency)}")  # fmt: skip
        refund = order.refunds.filter(id__gt=last_refund, reason=Refund.Reason.LINES_CANCELLED).first()
        if refund is not None:
            said += f"; a refund of {format_money(refund.amount, refund.currency)} requested"
        return f"{said}."


CONDITIONS = [
    ("", "Choose"),
    (ReturnCondition.RESTOCK, "Restock (back on sale)"),
    (ReturnCondition.DAMAGED, "Damaged (written off)"),
]


class ReceiveReturnForm(forms.Form):
    """The parcel as staff found it: a condition for each line of the return."""

    def __init__(self, *args, returned: Return, **kwargs):
        super().__init__(*args, **kwargs)
        self.returned, self.currency = returned, returned.order.currency
        self.lines = list(returned.lines.select_related("item").order_by("id"))
        for line in self.lines:
            self.fields[f"line_{line.id}"] = forms.ChoiceField(
                label=f"{line.quantity} x {line.item.product_id}", choices=CONDITIONS, help_text=line.item.name
            )

    def save(self, *, user) -> str:
        conditions = {line.item.product_id: self.cleaned_data[f"line_{line.id}"] for line in self.lines}
        received = receive_return(return_id=self.returned.id, conditions=conditions, user=user)
        refund = received.refund
        money = (f"refund of {format_money(refund.amount, refund.currency)} requested" if refund
                 else "nothing to refund (no money was taken)")  # fmt: skip
        return f"received {return_lines(received)}; {money}."


# --- shown as money ---------------------------------------------------------------------------------------


class AmountShown:
    """A payment's or a refund's amount as money, in its own currency: for lists,
    inlines and view pages, in place of the `amount` and `currency` fields."""

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, record):
        return format_money(record.amount, record.currency)


class PaymentAmountsShown(AmountShown):
    @admin.display(description="authorized", ordering="amount")
    def amount_shown(self, payment):
        return format_money(payment.amount, payment.currency)

    @admin.display(description="captured")
    def captured_shown(self, payment):
        return format_money(payment.captured_amount, payment.currency)

    @admin.display(description="refunded")
    def refunded_shown(self, payment):
        return format_money(payment.refunded_amount, payment.currency)


class RefundShown(AmountShown):
    @admin.display(description="lines")
    def lines_shown(self, refund):
        """The units it pays back, each with its amount: "2 x A (€19.34)"; "-" for an amount alone."""
        return ", ".join(
            f"{line['quantity']} x {line['sku']} ({format_money(line['amount'], refund.currency)})"
            for line in refund.lines
        ) or "-"


SHOWN = {"amount": "amount_shown", "captured_amount": "captured_shown", "refunded_amount": "refunded_shown",
         "lines": "lines_shown"}  # fmt: skip


def fields_shown(model) -> list[str]:
    """Every field of a payment or a refund, as its view page shows them (money as money)."""
    names = [field.name for field in model._meta.fields if field.name != "currency"]
    return [SHOWN.get(name, name) for name in names]


def _link(model: str, pk: int, text: str) -> str:
    return format_html('<a href="{}">{}</a>', reverse(f"admin:orders_{model}_change", args=[pk]), text)


# --- the order page -----------------------------------------------------------------------------------------


class OrderItemInline(ReadOnlyInline):
    model = OrderItem
    fields = [
        "product", "name", "quantity", "price", "discount_off", "line_total", "cancelled", "shipped", "in_returns",
        "returned", "refunded",
    ]  # fmt: skip

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

    @admin.display(description="shipped")
    def shipped(self, item):
        return item.shipped_units if item.order.shipped_at else "-"


class PaymentInline(PaymentAmountsShown, ReadOnlyInline):
    model = Payment
    fields = ["provider_payment_id", "amount_shown", "captured_shown", "refunded_shown", "status", "outcome",
              "received_at"]  # fmt: skip


class RefundInline(RefundShown, ReadOnlyInline):
    model = Refund
    fields = ["payment", "amount_shown", "reason", "note", "lines_shown", "status", "failure_reason", "created_at",
              "completed_at"]  # fmt: skip

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("payment")


class ReturnShown:
    @admin.display(description="lines")
    def lines_shown(self, returned):
        return return_lines(returned)

    @admin.display(description="refund")
    def refund_shown(self, returned):
        refund = returned.refund
        return format_money(refund.amount, refund.currency) if refund else "-"


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
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "status", "total", "created_at", "expires_at", "paid_at"]
    list_filter = ["status", "created_at"]
    search_fields = ["=id", "customer__username", "customer__email", "items__product__sku"]
    list_select_related = ["customer"]
    # An order is a snapshot of what was bought, for how much, shipped where: staff
    # change it only through the actions and the forms (services), never by editing its fields.
    readonly_fields = [
        "customer", "idempotency_key", "request_hash", "status", "total",
        "created_at", "expires_at", "paid_at", "shipped_at", "cancelled_at", "rejection_reason", "ship_to",
        "shipment_status", "payment_timeline", "events",
    ]  # fmt: skip
    fieldsets = [
        (None, {"fields": readonly_fields[:-2]}),
        ("Payments", {"fields": ["payment_timeline"]}),
        ("Events", {"fields": ["events"]}),
    ]
    inlines = [OrderItemInline, PaymentInline, RefundInline, ReturnInline]
    actions = ["cancel_pending", "refund_paid", "mark_shipped", "capture_payments", "void_payments", "export_csv"]
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
        payment = Payment.objects.filter(order=order, outcome=Payment.Outcome.APPLIED).first()
        if payment is not None and payment.status in CAPTURED_STATUSES:
            left = format_money(payment.captured_amount - payment.refunded_amount, payment.currency)
            held = (f"Payment {payment.provider_payment_id}: {format_money(payment.captured_amount, payment.currency)} "
                    f"captured, {format_money(payment.refunded_amount, payment.currency)} refunded or being refunded: "
                    f"up to {left} can be given back.")  # fmt: skip
        else:
            held = "Its payment is not captured: there is nothing to give back yet."
        form = GoodwillRefundForm(request.POST if request.method == "POST" else None, order=order)
        return service_form_page(
            self, request, form=form, subject=f"Order {order.id}", back=self._change_url(order),
            title=f"Refund an amount of order {order.id} (goodwill)", submit="Refund",
            intro=[f"Total {format_money(order.total_amount, order.currency)}, {order.get_status_display()}.", held,
                   "The money goes back without a return: no unit of the order changes."],
        )  # fmt: skip

    def remove_lines_view(self, request, object_id):
        order = self._order_to_change(request, object_id)
        if order.status != OrderStatus.PAID:
            self.message_user(request, f"Order {order.id}: only a paid order that has not shipped can lose lines; "
                              f"it is {order.get_status_display()}.", messages.WARNING)  # fmt: skip
            return HttpResponseRedirect(self._change_url(order))
        form = RemoveLinesForm(request.POST if request.method == "POST" else None, order=order)
        return service_form_page(
            self, request, form=form, subject=f"Order {order.id}", back=self._change_url(order),
            title=f"Remove lines of order {order.id}", submit="Remove",
            intro=[f"Total {format_money(order.total_amount, order.currency)}. The units removed go back on sale "
                   "and the total drops by what they cost: a payment only authorized is captured for the new "
                   "total, a captured one refunds them. Removing every unit is cancelling the order: use the "
                   "actions instead."],
        )  # fmt: skip

    @staticmethod
    def _change_url(order: Order) -> str:
        return reverse("admin:orders_order_change", args=[order.pk])

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

    @admin.display(description="timeline")
    def events(self, order):
        """The order's outbox events, oldest first: when, what (in a few words), and
        whether the relay published it yet."""
        events = OutboxEvent.objects.filter(aggregate_type="order", aggregate_id=str(order.id)).order_by("id")
        return format_html_join(
            "\n",
            '<div class="order-event">{} &middot; {} &middot; {}</div>',
            (
                (_at(e.created_at), event_summary(e, order.currency),
                 f"published {_at(e.published_at)}" if e.published_at else f"waiting ({e.attempts} attempts)")
                for e in events
            ),
        ) or "-"  # fmt: skip

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
class PaymentAdmin(PaymentAmountsShown, ReadOnlyAdmin):
    list_display = ["provider_payment_id", "order_id", "amount_shown", "status", "outcome", "received_at"]
    list_filter = ["status", "outcome"]
    search_fields = ["provider_payment_id", "=order__id"]
    fields = readonly_fields = fields_shown(Payment)


@admin.register(Refund)
class RefundAdmin(RefundShown, ReadOnlyAdmin):
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


@admin.register(Return)
class ReturnAdmin(ReturnShown, admin.ModelAdmin):
    """Returns are part of their order: whoever may view orders sees them, whoever
    may change orders decides and receives them (services, through the actions and
    the receive page); no field is ever edited."""

    list_display = ["id", "order_link", "status", "lines_shown", "created_at", "refund_shown"]
    list_filter = ["status"]
    search_fields = ["=id", "=order__id"]
    list_select_related = ["refund"]
    fields = readonly_fields = [
        "order_link", "status", "reason", "lines_shown", "created_at", "decided_at", "decided_by", "received_at",
        "refund_link",
    ]  # fmt: skip
    actions = ["approve", "reject"]
    change_form_template = "admin/orders/change_form_with_tools.html"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("lines__item")

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("orders.view_order") or request.user.has_perm("orders.change_order")

    def has_change_permission(self, request, obj=None):
        # The actions and the receive page need it; a return's own page stays read-only.
        return obj is None and request.user.has_perm("orders.change_order")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        receive = self.admin_site.admin_view(self.receive_view)
        return [path("<path:object_id>/receive/", receive, name="orders_return_receive"), *super().get_urls()]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        receivable = obj is not None and obj.status in (Return.Status.REQUESTED, Return.Status.APPROVED)
        context["staff_tools"] = (
            [("Receive", reverse("admin:orders_return_receive", args=[obj.pk]))]
            if receivable and self.has_change_permission(request) else []
        )  # fmt: skip
        return super().render_change_form(request, context, add, change, form_url, obj)

    def receive_view(self, request, object_id):
        if not self.has_change_permission(request):
            raise PermissionDenied
        returned = self.get_queryset(request).select_related("order").filter(pk=unquote(object_id)).first()
        if returned is None:
            raise Http404("No such return")
        back = reverse("admin:orders_return_change", args=[returned.pk])
        if returned.status not in (Return.Status.REQUESTED, Return.Status.APPROVED):
            self.message_user(request, f"Return {returned.id}: only a requested or approved return can be "
                              f"received; it is {returned.get_status_display()}.", messages.WARNING)  # fmt: skip
            return HttpResponseRedirect(back)
        form = ReceiveReturnForm(request.POST if request.method == "POST" else None, returned=returned)
        return service_form_page(
            self, request, form=form, subject=f"Return {returned.id}", back=back,
            title=f"Receive return {returned.id} of order {returned.order_id}", submit="Receive",
            intro=[f"{returned.get_status_display()}: {return_lines(returned)}"
                   + (f" (“{returned.reason}”)." if returned.reason else "."),
                   "Each line back on sale (restock) or written off (damaged), both through the stock ledger; "
                   "the units received are refunded at the price paid."],
        )  # fmt: skip

    @admin.display(description="order", ordering="order_id")
    def order_link(self, returned):
        return _link("order", returned.order_id, f"Order {returned.order_id}")

    @admin.display(description="refund")
    def refund_link(self, returned):
        refund = returned.refund
        if refund is None:
            return "-"
        money = format_money(refund.amount, refund.currency)
        return _link("refund", refund.id, f"{money} ({refund.get_status_display()})")

    def _decide(self, request, queryset, service, done: str):
        for returned in queryset:
            if returned.status != Return.Status.REQUESTED:
                self.message_user(request, f"Return {returned.id}: skipped, it is {returned.status}.", messages.WARNING)
                continue
            try:
                service(return_id=returned.id, user=request.user)
            except DomainError as error:
                self.message_user(request, f"Return {returned.id}: {error.message}", messages.ERROR)
            else:
                done_here = f"Return {returned.id} (order {returned.order_id}): {done}."
                self.message_user(request, done_here, messages.SUCCESS)

    @admin.action(description="Approve selected requested returns", permissions=["change"])
    def approve(self, request, queryset):
        self._decide(request, queryset, approve_return, "approved, the shopper may send the parcel")

    @admin.action(description="Reject selected requested returns (their units may be returned again)",
                  permissions=["change"])  # fmt: skip
    def reject(self, request, queryset):
        self._decide(request, queryset, reject_return, "rejected")
