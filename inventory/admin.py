from django.contrib import admin

from inventory.models import Stock, StockMovement


@admin.register(Stock)
class StockAdmin(admin.ModelAdmin):
    """Read-only: stock changes only through the ledger services."""

    list_display = ["product_id", "product_name", "available", "reserved", "shipped"]
    list_select_related = ["product"]
    search_fields = ["product__sku", "product__name"]
    ordering = ["product_id"]

    @admin.display(description="name", ordering="product__name")
    def product_name(self, stock):
        return stock.product.name

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(StockMovement)
class StockMovementAdmin(admin.ModelAdmin):
    list_display = ["id", "product_id", "delta", "reason", "note", "created_by", "created_at"]
    list_filter = ["reason"]
    search_fields = ["product__sku"]
    list_select_related = ["created_by"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
