from core.errors import ErrorCode
from core.exceptions import DomainError
from inventory.models import MAX_UNITS


class OutOfStock(DomainError):
    code = ErrorCode.OUT_OF_STOCK
    status = 409
    message = "Not enough stock for this SKU."


class WriteOffBelowZero(DomainError):
    code = ErrorCode.WRITE_OFF_BELOW_ZERO
    status = 409
    message = "Cannot write off more units than are available."


class StockLimitExceeded(DomainError):
    code = ErrorCode.STOCK_LIMIT_EXCEEDED
    status = 422
    message = f"A SKU can hold at most {MAX_UNITS} units."
