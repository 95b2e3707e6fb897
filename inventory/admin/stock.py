"""Stock for staff, safe under live traffic: no form ever writes `available` or
`reserved` back. Every change is a delta applied with F() by a service, with a
ledger entry naming the user. The one stock setting staff edit in place is a
SKU's low-stock threshold, written alone and only when the form changed it."""

from django.contrib import admin, messages
from django.db.models import Exists, OuterRef
from django.http import HttpResponseRedirect
from django.shortcuts import render

from core.exceptions import DomainError
from inventory import gate
from inventory.admin.forms import BulkQuantityForm, StockAdjustmentForm
from inventory.admin.stock_pages import StockPages
from inventory.models import FlashSale, Stock
from inventory.services.adjustments import UNCHANGED, adjust_stock, receive_stock_bulk

ADJUST_STOCK = ("Adjust stock", {"fields": ["operation", "quantity", "note"]})


class LowStockFilter(admin.SimpleListFilter):
    title = "stock level"
    parameter_name = "low"

    def lookups(self, request, model_admin):
        return [("yes", "Low (below its threshold)"), ("no", "Enough")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.low()
        if self.value() == "no":
            return queryset.not_low()
        return queryset


class GatedFilter(admin.SimpleListFilter):
    title = "flash sale"
    parameter_name = "gated"

    def lookups(self, request, model_admin):
        return [("yes", "Gated"), ("no", "Not gated")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(is_gated=self.value() == "yes")
        return queryset


@admin.register(Stock)
class StockAdmin(StockPages, admin.ModelAdmin):
    form = StockAdjustmentForm
    list_display = ["product_id", "product_name", "available", "reserved", "shipped", "low_stock"]  # + gate counter
    list_select_related = ["product"]
    list_filter = [LowStockFilter, GatedFilter, "product__is_active"]
    search_fields = ["product__sku", "product__name"]
    ordering = ["product_id"]
    readonly_fields = ["product", "available", "reserved", "shipped"]
    fieldsets = [
        (None, {"fields": ["product", "available", "reserved", "shipped"]}),
        ADJUST_STOCK,
        ("Low stock", {"fields": ["low_stock_threshold"]}),
    ]
    actions = ["bulk_receive", "audit_selected"]
    show_full_result_count = False
    change_list_template = "admin/inventory/stock/change_list.html"

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .with_low_stock()
            .annotate(is_gated=Exists(FlashSale.objects.filter(product_id=OuterRef("product_id"))))
        )

    def get_fieldsets(self, request, obj=None):
        if self.has_change_permission(request, obj):
            return super().get_fieldsets(request, obj)
        return [fieldset for fieldset in self.fieldsets if fieldset is not ADJUST_STOCK]  # nothing to adjust

    @admin.display(description="name", ordering="product__name")
    def product_name(self, stock):
        return stock.product.name

    @admin.display(description="low stock", ordering="is_low")
    def low_stock(self, stock):
        return f"LOW (below {stock.threshold})" if stock.is_low else ""

    def get_list_display(self, request):
        # The gate column reads Redis once for the page, into state of this request
        # only: the ModelAdmin instance is shared by every thread of a worker.
        counters: dict[str, int | None] | None = None

        @admin.display(description="gate counter")
        def gate_counter(stock):
            nonlocal counters
            if not stock.is_gated:
                return "-"
            if counters is None:  # one Redis pipeline for the page, not one call per row
                skus = list(FlashSale.objects.values_list("product_id", flat=True))
                try:
                    counters = {sku: c["remaining"] for sku, c in gate.counters(skus=skus).items()}
                except Exception:
                    counters = {}
            value = counters.get(stock.product_id)
            return "lost" if value is None else value

        return [*super().get_list_display(request), gate_counter]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        # Never obj.save(): the row read when the form was opened is stale by now.
        data = form.cleaned_data
        threshold = data["low_stock_threshold"] if "low_stock_threshold" in form.changed_data else UNCHANGED
        try:
            adjust_stock(
                sku=obj.product_id,
                operation=data.get("operation") or None,
                quantity=data.get("quantity"),
                threshold=threshold,
                user=request.user,
                note=data.get("note", ""),
            )
        except DomainError as error:
            # On the request, never on self: the ModelAdmin is shared by every thread of a worker.
            request.stock_adjust_error = error.message

    def response_change(self, request, obj):
        error = getattr(request, "stock_adjust_error", None)
        if error:
            self.message_user(request, f"{obj.product_id}: {error}", messages.ERROR)
        else:
            obj.refresh_from_db()
            self.message_user(
                request, f"{obj.product_id}: now {obj.available} available, {obj.reserved} reserved.", messages.SUCCESS
            )
        if "_continue" in request.POST:
            return HttpResponseRedirect(request.path)
        return self._redirect_to_changelist()

    def log_change(self, request, obj, message):
        return super().log_change(request, obj, message or "stock adjusted")

    @admin.action(description="Receive stock for selected SKUs (+N each)", permissions=["change"])
    def bulk_receive(self, request, queryset):
        form = BulkQuantityForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return render(
                request,
                "admin/inventory/stock/bulk_receive.html",
                {**self.admin_site.each_context(request), "form": form, "stocks": queryset, "opts": self.model._meta},
            )
        quantity = form.cleaned_data["quantity"]
        try:
            received = receive_stock_bulk(
                skus=queryset.values_list("product_id", flat=True),
                quantity=quantity,
                user=request.user,
                note=form.cleaned_data["note"],
            )
        except DomainError as error:
            self.message_user(request, f"Nothing received: {error.details.get('sku')}: {error.message}", messages.ERROR)
        else:
            self.message_user(request, f"Received {quantity} units for {received} SKU(s).", messages.SUCCESS)
        return None
