"""Every `code` the API can answer in its error envelope, in one place.

``{"error": {"code": ..., "message": ..., "details": ...}}``: clients branch on
`code`, so a value here is a wire contract. Add a member for a new error; never
rename or reuse a value. The OpenAPI schema documents `code` as an enum of
exactly these values (core/openapi.py), and tests/core/test_error_codes.py
checks that every DomainError subclass uses one.

Core holds the whole registry, the apps' codes included: it names them, it
imports no app.
"""

from enum import StrEnum, unique


@unique
class ErrorCode(StrEnum):
    # --- The platform: DRF's and Django's refusals, limits, outages -------------------
    ERROR = "error"  # a DomainError or DRF APIException with no code of its own
    INVALID = "invalid"  # a validation error: `details` holds the fields' messages
    MALFORMED_REQUEST = "malformed_request"  # a body that is not parseable JSON (or nested too deep)
    NOT_AUTHENTICATED = "not_authenticated"
    AUTHENTICATION_FAILED = "authentication_failed"
    PERMISSION_DENIED = "permission_denied"
    CSRF_FAILED = "csrf_failed"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    NOT_ACCEPTABLE = "not_acceptable"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RATE_LIMITED = "rate_limited"
    DATABASE_UNAVAILABLE = "database_unavailable"
    CACHE_UNAVAILABLE = "cache_unavailable"
    CATALOG_CHANGING = "catalog_changing"  # the hot caches went stale twice in one request
    INTERNAL_ERROR = "internal_error"

    # --- shop: accounts and tokens ----------------------------------------------------
    USERNAME_TAKEN = "username_taken"
    INVALID_CREDENTIALS = "invalid_credentials"
    WRONG_PASSWORD = "wrong_password"
    INVALID_TOKEN = "invalid_token"  # a password-reset or e-mail verification link that is bad, used or expired
    EMAIL_NOT_VERIFIED = "email_not_verified"  # REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT and the e-mail is not verified
    NOTHING_TO_VERIFY = "nothing_to_verify"  # a verification link asked for with no address, or a verified one

    # --- shop: vouchers ---------------------------------------------------------------
    VOUCHER_UNKNOWN = "voucher_unknown"
    VOUCHER_EXPIRED = "voucher_expired"
    VOUCHER_NOT_STARTED = "voucher_not_started"
    VOUCHER_USED_UP = "voucher_used_up"  # its usage limit reached, or this shopper's
    VOUCHER_NOT_APPLICABLE = "voucher_not_applicable"  # no listed SKU in the cart, or the subtotal below its minimum

    # --- shop: shipping ---------------------------------------------------------------
    SHIPPING_METHOD_UNKNOWN = "shipping_method_unknown"  # no active method has the code
    SHIPPING_METHOD_UNAVAILABLE = "shipping_method_unavailable"  # it does not ship there, or cannot carry the cart
    SHIPPING_METHOD_REQUIRED = "shipping_method_required"  # the cart's goods ship and none was chosen

    # --- cart -------------------------------------------------------------------------
    CART_FULL = "cart_full"
    CART_TOKEN_UNKNOWN = "cart_token_unknown"
    CART_UNAVAILABLE = "cart_unavailable"
    UNKNOWN_SKU = "unknown_sku"
    INACTIVE_SKU = "inactive_sku"

    # --- inventory: stock and the flash-sale gate -------------------------------------
    OUT_OF_STOCK = "out_of_stock"
    WRITE_OFF_BELOW_ZERO = "write_off_below_zero"
    STOCK_LIMIT_EXCEEDED = "stock_limit_exceeded"
    SOLD_OUT = "sold_out"
    LIMIT_REACHED = "limit_reached"
    GATE_UNAVAILABLE = "gate_unavailable"
    SALE_NOT_STARTED = "sale_not_started"
    SALE_ENDED = "sale_ended"

    # --- orders: checkout, orders, payments -------------------------------------------
    IDEMPOTENCY_KEY_MISSING = "idempotency_key_missing"
    IDEMPOTENCY_KEY_INVALID = "idempotency_key_invalid"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    CART_EMPTY = "cart_empty"
    SHIPPING_ADDRESS_REQUIRED = "shipping_address_required"
    QUEUE_UNAVAILABLE = "queue_unavailable"
    SKU_UNAVAILABLE = "sku_unavailable"
    TOO_MANY_PENDING_ORDERS = "too_many_pending_orders"
    HOLD_LIMIT_REACHED = "hold_limit_reached"
    ORDER_NOT_CANCELLABLE = "order_not_cancellable"
    ORDER_NOT_REFUNDABLE = "order_not_refundable"
    ORDER_NOT_SHIPPABLE = "order_not_shippable"
    ORDER_NOT_PAYABLE = "order_not_payable"  # paid, cancelled, expired, or queued and not written yet
    PAYMENT_PROVIDER_UNAVAILABLE = "payment_provider_unavailable"
    PAYMENT_NOT_CAPTURED = "payment_not_captured"  # a refund of money only authorized, or being moved
    REFUND_EXCEEDS_CAPTURED = "refund_exceeds_captured"
    LINES_NOT_REMOVABLE = "lines_not_removable"  # more units than the order still has, or all of them
    ORDER_NOT_SHIPPED = "order_not_shipped"
    RETURN_WINDOW_CLOSED = "return_window_closed"
    NOTHING_TO_RETURN = "nothing_to_return"
    SKU_NOT_ON_ORDER = "sku_not_on_order"
    TOO_MANY_UNITS = "too_many_units"
    RETURN_NOT_RECEIVABLE = "return_not_receivable"  # rejected or received already
    RETURN_NOT_DECIDABLE = "return_not_decidable"  # approved, rejected or received already
    INVALID_SIGNATURE = "invalid_signature"
    INVALID_WEBHOOK_BODY = "invalid_webhook_body"

    # --- orders: a shopper's account erased (orders/services/erasure.py) ---------------
    ACCOUNT_HAS_OPEN_ORDERS = "account_has_open_orders"  # an order awaiting payment or shipment, or a return open
    ACCOUNT_IS_STAFF = "account_is_staff"  # staff and superusers are not erased as shoppers
