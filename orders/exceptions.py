from core.exceptions import DomainError


class IdempotencyKeyMissing(DomainError):
    code = "idempotency_key_missing"
    status = 400
    message = "The Idempotency-Key header is required."


class IdempotencyKeyInvalid(DomainError):
    code = "idempotency_key_invalid"
    status = 400
    message = "The Idempotency-Key header must be 1-64 visible ASCII characters."


class IdempotencyKeyReused(DomainError):
    code = "idempotency_key_reused"
    status = 422
    message = "This Idempotency-Key was used for a different cart."


class CartEmpty(DomainError):
    code = "cart_empty"
    status = 422
    message = "The cart is empty."


class ProductUnavailable(DomainError):
    code = "sku_unavailable"
    status = 422
    message = "A product in the cart is unknown or no longer on sale."


class OrderNotFound(DomainError):
    code = "not_found"
    status = 404
    message = "No such order."


class InvalidSignature(DomainError):
    code = "invalid_signature"
    status = 401
    message = "The Payment-Signature header is missing, malformed, stale or wrong."


class OrderNotCancellable(DomainError):
    code = "order_not_cancellable"
    status = 409
    message = "Only an order awaiting payment can be cancelled."


class OrderNotRefundable(DomainError):
    code = "order_not_refundable"
    status = 409
    message = "Only a paid order can be refunded."


class OrderNotShippable(DomainError):
    code = "order_not_shippable"
    status = 409
    message = "Only a paid order can be shipped."


class TooManyPendingOrders(DomainError):
    code = "too_many_pending_orders"
    status = 409
    message = "You have too many orders awaiting payment: pay or cancel one first."
