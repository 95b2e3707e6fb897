"""Stock for staff, safe under live traffic: no form ever writes `available` or
`reserved` back. Every change is a delta applied with F() by a service, with a
ledger entry naming the user. The one stock setting staff edit in place is a
SKU's low-stock threshold, written alone and only when the form changed it."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from core.admin import ReadOnlyAdmin
from core.exceptions import DomainError
from core.money import format_money, minor_units_help
from inventory import gate
from inventory.catalog_import import CatalogFileInvalid, import_catalog, parse_catalog
from inventory.models import MAX_UNITS, FlashSale, LowStockAlert, Shipment, Stock, StockMovement
from inventory.services import (
    receive_stock,
    set_available_stock,
    set_low_stock_threshold,
    stock_audit,
    write_off_stock,
)
from inventory.services.flash_sales import RULE_FIELDS, end_flash_sale, seed_flash_sale, update_flash_sale

OPERATIONS = {
    "receive": ("Receive stock (+N)", receive_stock),
    "write_off": ("Write off (-N)", write_off_stock),
    "set": ("Set available to N", set_available_stock),
}
MINOR_UNITS = minor_units_help(settings.SHOP_CURRENCY)


def adjust_stock(*, sku: str, operation: str, quantity: int, user, note: str = "") -> None:
    service = OPERATIONS[operation][1]
    if operation == "set":
        service(sku=sku, available=quantity, user=user, note=note)
    else:
        service(sku=sku, quantity=quantity, user=user, note=note)


class StockAdjustmentForm(forms.ModelForm):
    """The change form: no stock figure is editable; it asks for an operation,
    and edits the SKU's low-stock threshold."""

    operation = forms.ChoiceField(
        choices=[("", "No stock change"), *((key, label) for key, (label, _) in OPERATIONS.items())], required=False
    )
    quantity = forms.IntegerField(min_value=0, max_value=MAX_UNITS, required=False)
    note = forms.CharField(max_length=200, required=False)

    class Meta:
        model = Stock
        fields = ["low_stock_threshold"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        threshold = self.fields["low_stock_threshold"]
        threshold.help_text += f" The setting is {settings.LOW_STOCK_THRESHOLD}."
        # Changed means changed since the form was opened (its hidden initial value),
        # so that a stale form never puts back a threshold another user replaced.
        threshold.show_hidden_initial = True

    def clean(self):
        data = super().clean()
        if data.get("operation") and data.get("quantity") is None:
            self.add_error("quantity", "Give the number of units.")
        elif data.get("operation") in ("receive", "write_off") and data.get("quantity") == 0:
            self.add_error("quantity", "Receive or write off at least one unit.")
        return data


class BulkQuantityForm(forms.Form):
    quantity = forms.IntegerField(min_value=1, max_value=MAX_UNITS)
    note = forms.CharField(max_length=200, required=False)


class CatalogUploadForm(forms.Form):
    file = forms.FileField(help_text=f"CSV with the columns sku,name,price,stock (price in {MINOR_UNITS})")


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
class StockAdmin(admin.ModelAdmin):
    form = StockAdjustmentForm
    list_display = ["product_id", "product_name", "available", "reserved", "shipped", "low_stock"]  # + gate counter
    list_select_related = ["product"]
    list_filter = [LowStockFilter, GatedFilter, "product__is_active"]
    search_fields = ["product__sku", "product__name"]
    ordering = ["product_id"]
    readonly_fields = ["product", "available", "reserved", "shipped"]
    fieldsets = [
        (None, {"fields": ["product", "available", "reserved", "shipped"]}),
        ("Adjust stock", {"fields": ["operation", "quantity", "note"]}),
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
        if data.get("operation"):
            try:
                adjust_stock(
                    sku=obj.product_id,
                    operation=data["operation"],
                    quantity=data["quantity"],
                    user=request.user,
                    note=data.get("note", ""),
                )
            except DomainError as error:
                # On the request, never on self: the ModelAdmin is shared by every thread of a worker.
                request.stock_adjust_error = error.message
                return  # nothing of the form is saved
        if "low_stock_threshold" in form.changed_data:
            set_low_stock_threshold(sku=obj.product_id, threshold=data["low_stock_threshold"])

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
        if form.is_valid():
            quantity = form.cleaned_data["quantity"]
            try:
                with transaction.atomic():  # all SKUs or none
                    for stock in queryset:
                        receive_stock(
                            sku=stock.product_id, quantity=quantity, user=request.user, note=form.cleaned_data["note"]
                        )
            except DomainError as error:
                self.message_user(
                    request, f"Nothing received: {error.details.get('sku')}: {error.message}", messages.ERROR
                )
            else:
                self.message_user(
                    request, f"Received {quantity} units for {queryset.count()} SKU(s).", messages.SUCCESS
                )
            return None
        return render(
            request,
            "admin/inventory/stock/bulk_receive.html",
            {**self.admin_site.each_context(request), "form": form, "stocks": queryset, "opts": self.model._meta},
        )

    @admin.action(description="Audit selected SKUs (ledger vs stock)", permissions=["view"])
    def audit_selected(self, request, queryset):
        return self._audit_response(request, list(queryset.values_list("product_id", flat=True)))

    def get_urls(self):
        return [
            path("audit/", self.admin_site.admin_view(self.audit_view), name="inventory_stock_audit"),
            path("import/", self.admin_site.admin_view(self.import_view), name="inventory_stock_import"),
            *super().get_urls(),
        ]

    def audit_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self._audit_response(request, None)

    def _audit_response(self, request, skus):
        rows = stock_audit(skus=skus)
        return TemplateResponse(
            request,
            "admin/inventory/stock/audit.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Stock audit",
                "rows": rows,
                "differences": sum(1 for row in rows if row["difference"]),
            },
        )

    def import_view(self, request):
        if not self.has_change_permission(request):
            raise PermissionDenied
        form = CatalogUploadForm(request.POST or None, request.FILES or None)
        errors = []
        if form.is_valid():
            text = form.cleaned_data["file"].read().decode("utf-8-sig", errors="replace")
            try:
                rows = parse_catalog(text.splitlines())
            except CatalogFileInvalid as invalid:
                errors = invalid.errors
            else:
                result = import_catalog(rows=rows, user=request.user)
                self.message_user(
                    request,
                    f"{len(rows)} rows: {result.created} products created, {result.updated} updated, "
                    f"{result.stock_movements} stock movements.",
                    messages.SUCCESS,
                )
                return self._redirect_to_changelist()
        return TemplateResponse(
            request,
            "admin/inventory/stock/import.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Import catalog and stock (CSV)",
                "form": form,
                "errors": errors,
            },
        )

    def _redirect_to_changelist(self):
        return HttpResponseRedirect(reverse("admin:inventory_stock_changelist"))


@admin.register(StockMovement)
class StockMovementAdmin(ReadOnlyAdmin):
    list_display = ["id", "product_id", "delta", "reason", "note", "created_by", "created_at"]
    list_filter = ["reason"]
    search_fields = ["product__sku"]
    list_select_related = ["created_by"]
    show_full_result_count = False


@admin.register(Shipment)
class ShipmentAdmin(ReadOnlyAdmin):
    list_display = ["order_id", "status", "requested_at", "shipped_at"]
    list_filter = ["status"]
    search_fields = ["=order_id"]


class FlashSaleForm(forms.ModelForm):
    """A sale's rule, and on adding (or to re-seed) its units: validated as the
    model is, saved through the flash-sale services (which set the gate too),
    never by the model form."""

    stock = forms.IntegerField(
        min_value=0, max_value=MAX_UNITS, required=False,
        help_text="Units on sale, in the database and the gate. Required to open a sale; "
                  "on a running sale it re-seeds (clears the per-customer counts); blank keeps them.",
    )  # fmt: skip

    class Meta:
        model = FlashSale
        fields = ["product", "stock", "sale_price", "per_customer_limit", "mode", "starts_at", "ends_at"]
        help_texts = {
            "starts_at": "Checkouts are admitted from then on (Redis's clock: no process runs at the edges).",
            "ends_at": "Checkouts are refused from then on. Blank: no end.",
            "sale_price": f"What a unit costs inside the window, in {MINOR_UNITS}. Blank: the catalog price.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in RULE_FIELDS:  # changed means changed since the form was opened (its hidden initial value)
            if name in self.fields:  # a page that only shows the sale has none
                self.fields[name].show_hidden_initial = True

    def clean(self):
        data = super().clean()
        if self.instance._state.adding and data.get("stock") is None:
            self.add_error("stock", "Give the units the sale opens with.")
        starts, ends = data.get("starts_at"), data.get("ends_at")
        if starts and ends and ends <= starts:
            self.add_error("ends_at", "A sale ends after it starts.")
        return data


@admin.register(FlashSale)
class FlashSaleAdmin(admin.ModelAdmin):
    """Staff schedule, edit and end sales here as the commands do: through the
    services, which set the gate with the database."""

    form = FlashSaleForm
    raw_id_fields = ["product"]  # a catalog of 100,000 products is no select box
    list_display = [
        "product_id", "price", "mode", "per_customer_limit", "starts_at", "ends_at", "state", "available", "live",
    ]  # fmt: skip
    list_select_related = ["product__stock"]
    actions = ["end_sales"]

    def get_readonly_fields(self, request, obj=None):
        # "price": the sale price as money, next to the input in minor units.
        return ["product", "price"] if obj is not None else []

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is None or self.has_change_permission(request, obj):
            return fields
        return [name for name in fields if name != "sale_price"]  # shown only: as money, not the form's integer

    @admin.display(description="sale price", ordering="sale_price")
    def price(self, sale):
        if sale.sale_price is None:
            return f"catalog price ({format_money(sale.product.price, settings.SHOP_CURRENCY)})"
        return format_money(sale.sale_price, settings.SHOP_CURRENCY)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # ending a sale removes its gate: end_sales does both
        return actions

    @admin.display(description="available")
    def available(self, sale):
        return sale.product.stock.available

    @admin.display(description="now")
    def state(self, sale):
        now = timezone.now()
        if now < sale.starts_at:
            return "scheduled"
        return "ended" if sale.ends_at is not None and now >= sale.ends_at else "open"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        sku = obj.product_id
        if not change or data.get("stock") is not None:
            rule = {key: data.get(key) for key in RULE_FIELDS}
            sale = seed_flash_sale(sku=sku, stock=data["stock"], user=request.user, **rule)
        else:  # only what this form changed: a change made meanwhile (a mode switch) stays
            sale = update_flash_sale(sku=sku, **{key: data.get(key) for key in RULE_FIELDS if key in form.changed_data})
        obj.pk, obj.started_at = sale.pk, sale.started_at

    def delete_model(self, request, obj):
        end_flash_sale(sku=obj.product_id)

    @admin.action(description="End the selected sales now (removes their gates)", permissions=["delete"])
    def end_sales(self, request, queryset):
        ended = []
        for sku in queryset.values_list("product_id", flat=True):
            try:
                end_flash_sale(sku=sku)
            except DomainError:  # ended meanwhile by someone else
                continue
            ended.append(sku)
        self.message_user(request, f"Ended {len(ended)} flash sale(s): {', '.join(ended)}.", messages.SUCCESS)

    @admin.display(description="live page")
    def live(self, sale):
        return format_html('<a href="{}">watch</a>', reverse("admin:flash-sale-live", args=[sale.product_id]))


@admin.register(LowStockAlert)
class LowStockAlertAdmin(ReadOnlyAdmin):
    list_display = ["product_id", "day", "available", "threshold", "sent_at"]
    list_filter = ["day"]
    search_fields = ["product__sku"]
