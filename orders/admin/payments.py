"""Payments, refunds and notifications, and staff capturing or voiding an order's payment."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from core.admin import ReadOnlyAdmin
from core.money import format_money
from orders import money
from orders.admin.common import PaymentAmountsShown, RefundShown, fields_shown
from orders.models import Notification, OrderStatus, Payment, Refund
from orders.money import applied_payment, held_payment
from orders.provider import ProviderRefused, ProviderUnavailable
from orders.services import cancel_pending_order
from orders.services.authorizations import capture_for_order
from orders.services.payments import void_payment
from orders.services.refunds import retry_refund


class PaymentActions:
    """The order admin's actions on the money held for an order, each confirmed first."""

    def _confirmation(self, request, queryset, action: str, question: str):
        """Django's intermediate page (as for the delete action): the orders and
        the money each holds, and a Confirm button posting back with post=yes."""
        rows = []
        for order in queryset:
            payment = held_payment(order_id=order.id)
            held = f"{payment.provider_payment_id} ({payment.get_status_display()})" if payment else "no money held"
            rows.append((order.id, order.status, format_money(order.total_amount, order.currency), held))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": question,
            "rows": rows,
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/orders/order/payment_action_confirmation.html", context)

    @admin.action(description="Capture the payment of selected paid orders", permissions=["change"])
    def capture_payments(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirmation(request, queryset, "capture_payments", "Capture the payment of these orders?")
        for order in queryset:
            if order.status not in (OrderStatus.PAID, OrderStatus.SHIPPED):
                self.message_user(request, f"Order {order.id}: skipped, it is {order.status}.", messages.WARNING)
                continue
            payment = held_payment(order_id=order.id)
            outcome = capture_for_order(payment) if payment is not None else None
            if outcome == "captured":
                payment.refresh_from_db()
                taken = format_money(payment.captured_amount, payment.currency)
                self.message_user(request, f"Order {order.id}: captured {taken}.", messages.SUCCESS)
            elif outcome == "waiting":
                self.message_user(
                    request,
                    f"Order {order.id}: the payment provider is unavailable, nothing captured yet: try again.",
                    messages.WARNING,
                )
            elif outcome == "lapsed":
                self.message_user(
                    request,
                    f"Order {order.id}: its authorization lapsed, nothing can be captured: "
                    "ask the shopper to pay again, or cancel it.",
                    messages.ERROR,
                )
            elif outcome == "refused":
                self.message_user(
                    request, f"Order {order.id}: the provider refused the capture (see its timeline).", messages.ERROR
                )
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
                paid_by = applied_payment(order_id=order.id)
                captured = money.is_taken(paid_by) or getattr(paid_by, "status", None) == Payment.Status.CAPTURING
                why = "captured: refund it instead" if captured else "skipped, its status changed"
                self.message_user(request, f"Order {order.id}: {why}.", messages.WARNING)
                continue
            payment = held_payment(order_id=order.id)  # the one just claimed (VOIDING)
            try:
                if payment is not None:
                    void_payment(payment=payment)
            except ProviderUnavailable:
                self.message_user(
                    request,
                    f"Order {order.id}: cancelled, stock returned; the payment provider is "
                    "unavailable, the payments consumer will void the payment when it is back.",
                    messages.WARNING,
                )
            except ProviderRefused as error:
                self.message_user(request, f"Order {order.id}: cancelled, stock returned; {error}", messages.ERROR)
            else:
                self.message_user(
                    request, f"Order {order.id}: cancelled, stock returned, payment voided.", messages.SUCCESS
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
        "id",
        "order_id",
        "payment",
        "amount_shown",
        "reason",
        "status",
        "failure_reason",
        "attempt",
        "created_at",
        "completed_at",
    ]
    list_filter = ["status", "reason"]
    list_select_related = ["payment"]
    fields = readonly_fields = fields_shown(Refund)
    actions = ["retry"]

    def has_change_permission(self, request, obj=None):  # for the action; the form stays read-only
        return request.user.has_perm("orders.change_order")

    @admin.action(description="Retry selected failed refunds (a new attempt at the provider)", permissions=["change"])
    def retry(self, request, queryset):
        failed = list(queryset.filter(status=Refund.Status.FAILED).values_list("id", flat=True))
        retried = sum(retry_refund(refund_id=refund_id) for refund_id in failed)
        refused = f", {len(failed) - retried} refused (other refunds took the money)" if len(failed) > retried else ""
        self.message_user(
            request, f"{retried} refund(s) requested again{refused}; {queryset.count() - len(failed)} not failed"
        )


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["order_id", "kind", "to", "subject", "sent_at"]
    list_filter = ["kind"]
    search_fields = ["=order__id", "to"]
