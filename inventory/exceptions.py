from config.exceptions import DomainError


class OutOfStock(DomainError):
    code = "out_of_stock"
    status = 409
    message = "Not enough stock for this SKU."


class WriteOffBelowZero(DomainError):
    code = "write_off_below_zero"
    status = 409
    message = "Cannot write off more units than are available."
