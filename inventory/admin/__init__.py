"""The inventory admin, by subject; importing the modules registers their ModelAdmins."""

from inventory.admin.flash_sales import FlashSaleAdmin
from inventory.admin.forms import FlashSaleForm, StockAdjustmentForm
from inventory.admin.records import LowStockAlertAdmin, ShipmentAdmin, StockMovementAdmin
from inventory.admin.stock import GatedFilter, LowStockFilter, StockAdmin

__all__ = [
    "FlashSaleAdmin",
    "FlashSaleForm",
    "GatedFilter",
    "LowStockAlertAdmin",
    "LowStockFilter",
    "ShipmentAdmin",
    "StockAdjustmentForm",
    "StockAdmin",
    "StockMovementAdmin",
]
