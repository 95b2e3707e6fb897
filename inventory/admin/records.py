"""What happened, for staff to look at and never edit: the stock ledger,
shipments, low-stock alerts."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin
from inventory.models import LowStockAlert, Shipment, StockMovement


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


@admin.register(LowStockAlert)
class LowStockAlertAdmin(ReadOnlyAdmin):
    list_display = ["product_id", "day", "available", "threshold", "sent_at"]
    list_filter = ["day"]
    search_fields = ["product__sku"]
