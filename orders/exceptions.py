from core.errors import ErrorCode
from core.exceptions import DomainError


class IdempotencyKeyMissing(DomainError):
    code = ErrorCode.IDEMPOTENCY_KEY_MISSING
    status = 400
    message = "The Idempotency-Key header is required."


class IdempotencyKeyInvalid(DomainError):
    code = ErrorCode.IDEMPOTENCY_KEY_INVALID
    status = 400
    message = "The Idempotency-Key header must be 1-64 visible ASCII characters."


class IdempotencyKeyReused(DomainError):
    code = ErrorCode.IDEMPOTENCY_KEY_REUSED
    status = 422
    message = "This Idempotency-Key was used for a different cart."


class CartEmpty(DomainError):
    code = ErrorCode.CART_EMPTY
    status = 422
    message = "The cart is empty."


class ProductUnavailable(DomainError):
    code = ErrorCode.SKU_UNAVAILABLE
    status = 422
    message = "A product in the cart is unknown or no longer on sale."


class OrderNotFound(DomainError):
    code = ErrorCode.NOT_FOUND
    status = 404
    message = "No such order."


class InvalidSignature(DomainError):
    code = ErrorCode.INVALID_SIGNATURE
    status = 401
    message = "The Payment-Signature header is missing, malformed, stale or wrong."


class OrderNotCancellable(DomainError):
    code = ErrorCode.ORDER_NOT_CANCELLABLE
    status = 409
    message = "Only an order awaiting payment, or paid with the money only authorized (not shipped), can be cancelled."


class OrderNotRefundable(DomainError):
    code = ErrorCode.ORDER_NOT_REFUNDABLE
    status = 409
    message = "Only a paid order can be refunded."


class InvalidWebhookBody(DomainError):
    code = ErrorCode.INVALID_WEBHOOK_BODY
    status = 400
    message = "The signed body is not a provider's event object."


class OrderNotShippable(DomainError):
    code = ErrorCode.ORDER_NOT_SHIPPABLE
    status = 409
    message = "Only a paid order can be shipped."


class TooManyPendingOrders(DomainError):
    code = ErrorCode.TOO_MANY_PENDING_ORDERS
    status = 409
    message = "You have too many orders awaiting payment: pay or cancel one first."


class HoldLimitReached(DomainError):
    code = ErrorCode.HOLD_LIMIT_REACHED
    status = 409
    message = "Unpaid orders already hold as many units of this product as one shopper may: pay or cancel one first."


class QueueUnavailable(DomainError):
    code = ErrorCode.QUEUE_UNAVAILABLE
    status = 503
    message = "The flash-sale queue is unavailable; nothing was ordered. Retry shortly."


class ShippingAddressRequired(DomainError):
    code = ErrorCode.SHIPPING_ADDRESS_REQUIRED
    status = 422
    message = "Send a shipping_address with the checkout, or save a default one (PUT /api/auth/me/address)."


class OrderNotPayable(DomainError):
    code = ErrorCode.ORDER_NOT_PAYABLE
    status = 409
    message = "Only an order awaiting payment, before its deadline, can be paid."


class PaymentProviderUnavailable(DomainError):
    code = ErrorCode.PAYMENT_PROVIDER_UNAVAILABLE
    status = 503
    message = "The payment provider is unavailable; retry shortly."


class PaymentNotCaptured(DomainError):
    code = ErrorCode.PAYMENT_NOT_CAPTURED
    status = 409
    message = "The order's payment is not captured (only authorized, or being captured or voided): nothing to refund."


class RefundExceedsCaptured(DomainError):
    code = ErrorCode.REFUND_EXCEEDS_CAPTURED
    status = 409
    message = "The refunds of this payment would exceed what was captured."


class LinesNotRemovable(DomainError):
    code = ErrorCode.LINES_NOT_REMOVABLE
    status = 422
    message = "Only units the paid, unshipped order still has can be removed, and not all of them: cancel the order."


class OrderNotShipped(DomainError):
    code = ErrorCode.ORDER_NOT_SHIPPED
    status = 409
    message = "Only a shipped order can be returned."


class ReturnWindowClosed(DomainError):
    code = ErrorCode.RETURN_WINDOW_CLOSED
    status = 409
    message = "The return window of this order has closed."


class NothingToReturn(DomainError):
    code = ErrorCode.NOTHING_TO_RETURN
    status = 409
    message = "Every unit of this order is returned or in a return already."


class SkuNotOnOrder(DomainError):
    code = ErrorCode.SKU_NOT_ON_ORDER
    status = 422
    message = "A SKU is not on this order."


class TooManyUnits(DomainError):
    code = ErrorCode.TOO_MANY_UNITS
    status = 422
    message = "More units than can still be returned."


class ReturnNotFound(DomainError):
    code = ErrorCode.NOT_FOUND
    status = 404
    message = "No such return."


class ReturnNotDecidable(DomainError):
    code = ErrorCode.RETURN_NOT_DECIDABLE
    status = 409
    message = "Only a requested return can be approved or rejected."


class ReturnNotReceivable(DomainError):
    code = ErrorCode.RETURN_NOT_RECEIVABLE
    status = 409
    message = "Only a requested or approved return can be received."


class AccountHasOpenOrders(DomainError):
    """Details: `orders` [{`id`, `status`}] still awaiting payment or shipment, and
    `returns` [{`id`, `order_id`, `status`}] still open."""

    code = ErrorCode.ACCOUNT_HAS_OPEN_ORDERS
    status = 409
    message = (
        "The account has orders awaiting payment or shipment, or returns in progress: "
        "it can be erased once they are done or cancelled."
    )


class AccountIsStaff(DomainError):
    code = ErrorCode.ACCOUNT_IS_STAFF
    status = 409
    message = "A staff or superuser account is not erased as a shopper's: take its staff status away first."
