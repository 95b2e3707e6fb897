"""Flash sales in the admin."""

from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from core.exceptions import DomainError
from core.money import format_money
from inventory.admin.forms import FlashSaleForm
from inventory.models import FlashSale
from inventory.services.flash_sales import RULE_FIELDS, end_flash_sale, seed_flash_sale, update_flash_sale


@admin.register(FlashSale)
class FlashSaleAdmin(admin.ModelAdmin):
    """Staff schedule, edit and end sales here as the commands do: through the
    services, which set the gate with the database."""

    form = FlashSaleForm
    raw_id_fields = ["product"]  # a catalog of 100,000 products is no select box
    list_display = [
        "product_id",
        "price",
        "mode",
        "per_customer_limit",
        "starts_at",
        "ends_at",
        "state",
        "available",
        "live",
    ]
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
