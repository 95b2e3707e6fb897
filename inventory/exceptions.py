from core.exceptions import DomainError
from inventory.models import MAX_UNITS


class OutOfStock(DomainError):
    code = "out_of_stock"
    status = 409
    message = "Not enough stock for this SKU."


class WriteOffBelowZero(DomainError):
    code = "write_off_below_zero"
    status = 409
    message = "Cannot write off more units than are available."


class StockLimitExceeded(DomainError):
    code = "stock_limit_exceeded"
    status = 422
    message = f"A SKU can hold at most {MAX_UNITS} units."
