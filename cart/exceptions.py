from core.errors import ErrorCode
from core.exceptions import DomainError


class CartFull(DomainError):
    code = ErrorCode.CART_FULL
    status = 409
    message = "The cart already holds the maximum number of lines."


class CartUnavailable(DomainError):
    code = ErrorCode.CART_UNAVAILABLE
    status = 503
    message = "The cart store is unavailable; retry shortly."


class UnknownProduct(DomainError):
    code = ErrorCode.UNKNOWN_SKU
    status = 404
    message = "No product has this SKU."


class InactiveProduct(DomainError):
    code = ErrorCode.INACTIVE_SKU
    status = 422
    message = "This product is not on sale."


class CartTokenUnknown(DomainError):
    code = ErrorCode.CART_TOKEN_UNKNOWN
    status = 404
    message = "No guest cart has this Cart-Token (it expired, or was merged at login): start a new one."
