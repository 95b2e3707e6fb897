"""Everything that writes stock: the ledger, reservations, staff adjustments,
shipments, flash sales."""

from inventory.services.adjustments import adjust_stock, receive_stock_bulk
from inventory.services.shipments import replace_shipment_addresses, ship_order
from inventory.services.stock import (
    lock_stock,
    receive_stock,
    reserve_stock,
    return_reserved_stock,
    set_available_stock,
    set_available_stock_bulk,
    set_low_stock_threshold,
    ship_reserved_stock,
    stock_audit,
    take_back_returned,
    write_off_stock,
)

__all__ = [
    "replace_shipment_addresses",
    "adjust_stock",
    "lock_stock",
    "receive_stock",
    "receive_stock_bulk",
    "reserve_stock",
    "return_reserved_stock",
    "set_available_stock",
    "set_available_stock_bulk",
    "set_low_stock_threshold",
    "ship_order",
    "ship_reserved_stock",
    "stock_audit",
    "take_back_returned",
    "write_off_stock",
]
