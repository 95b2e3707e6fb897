"""Everything that writes stock: the ledger, reservations, flash sales."""

from inventory.services.stock import (
    receive_stock,
    reserve_stock,
    return_reserved_stock,
    set_available_stock,
    ship_reserved_stock,
    stock_audit,
    write_off_stock,
)

__all__ = [
    "receive_stock",
    "reserve_stock",
    "return_reserved_stock",
    "set_available_stock",
    "ship_reserved_stock",
    "stock_audit",
    "write_off_stock",
]
