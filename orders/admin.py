from django.contrib import admin, messages

from config.exceptions import DomainError
from orders.models import Order, OrderItem, OrderStatus, Payment, Refund
from orders.services import cancel_pending_order, refund_paid_order


class OrderItemInline(admin.TabularInline):
    model = OrderItem
    fields = ["product", "name", "quantity", "unit_price"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "status", "total_amount", "currency", "created_at", "expires_at", "paid_at"]
    list_filter = ["status", "created_at"]
    search_fields = ["=id", "customer__username", "customer__email", "items__product__sku"]
    list_select_related = ["customer"]
    readonly_fields = [
        "customer", "idempotency_key", "request_hash", "status", "total_amount", "currency",
        "created_at", "expires_at", "paid_at", "cancelled_at",
    ]
    inlines = [OrderItemInline]
    actions = ["cancel_pending", "refund_paid"]
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

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

    @admin.action(description="Cancel selected pending orders (stock returned)")
    def cancel_pending(self, request, queryset):
        self._each(
            request, queryset, OrderStatus.PENDING_PAYMENT,
            lambda order: cancel_pending_order(order_id=order.id), "cancelled, stock returned",
        )

    @admin.action(description="Refund selected paid orders (stock returned)")
    def refund_paid(self, request, queryset):
        self._each(
            request, queryset, OrderStatus.PAID,
            lambda order: refund_paid_order(order_id=order.id, user=request.user), "refund requested, stock returned",
        )


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    list_display = ["provider_payment_id", "order_id", "amount", "currency", "status", "outcome", "received_at"]
    list_filter = ["status", "outcome"]
    search_fields = ["provider_payment_id", "=order__id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Refund)
class RefundAdmin(admin.ModelAdmin):
    list_display = ["id", "order_id", "payment", "amount", "currency", "reason", "status", "created_at"]
    list_filter = ["reason", "status"]
    list_select_related = ["payment"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
