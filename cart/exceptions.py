from core.exceptions import DomainError


class CartFull(DomainError):
    code = "cart_full"
    status = 409
    message = "The cart already holds the maximum number of lines."


class CartUnavailable(DomainError):
    code = "cart_unavailable"
    status = 503
    message = "The cart store is unavailable; retry shortly."


class UnknownProduct(DomainError):
    code = "unknown_sku"
    status = 404
    message = "No product has this SKU."


class InactiveProduct(DomainError):
    code = "inactive_sku"
    status = 422
    message = "This product is not on sale."
