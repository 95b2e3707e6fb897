from django.contrib import admin

from core.admin import ReadOnlyAdmin
from shop.models import LoyaltyEntry, Product


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "price", "is_active", "updated_at"]
    list_filter = ["is_active"]
    search_fields = ["sku", "name"]
    readonly_fields = ["created_at", "updated_at"]
    ordering = ["sku"]

    def get_readonly_fields(self, request, obj=None):
        # The SKU is the key orders and stock refer to: set once.
        return [*self.readonly_fields, "sku"] if obj else self.readonly_fields

    def get_fields(self, request, obj=None):
        fields = ["sku", "name", "price", "is_active", "description", "image_url"]
        return [*fields, "created_at", "updated_at"] if obj else fields


@admin.register(LoyaltyEntry)
class LoyaltyEntryAdmin(ReadOnlyAdmin):
    list_display = ["customer", "order_id", "points", "reason", "created_at"]
    list_filter = ["reason"]
    search_fields = ["customer__username", "=order_id"]
    list_select_related = ["customer"]
