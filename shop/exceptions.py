from core.errors import ErrorCode
from core.exceptions import DomainError


class UsernameTaken(DomainError):
    code = ErrorCode.USERNAME_TAKEN
    status = 409
    message = "That username is already taken."


class InvalidCredentials(DomainError):
    code = ErrorCode.INVALID_CREDENTIALS
    status = 401
    message = "Unable to log in with the credentials provided."


class WrongPassword(DomainError):
    code = ErrorCode.WRONG_PASSWORD
    status = 400
    message = "The current password is not right."


class InvalidToken(DomainError):
    """A password-reset or e-mail verification link that is not (or no longer) good."""

    code = ErrorCode.INVALID_TOKEN
    status = 400
    message = "This link is invalid, has been used already or has expired: ask for a new one."


class EmailNotVerified(DomainError):
    code = ErrorCode.EMAIL_NOT_VERIFIED
    status = 403
    message = "Verify your e-mail address first: follow the link we sent you (POST /api/auth/verify-email/resend)."


class NothingToVerify(DomainError):
    code = ErrorCode.NOTHING_TO_VERIFY
    status = 409
    message = "There is no e-mail address waiting for verification: yours is verified, or you have none."


class VoucherRefused(DomainError):
    """A voucher code the cart cannot use (each reason its own 422)."""

    status = 422


class VoucherUnknown(VoucherRefused):
    code = ErrorCode.VOUCHER_UNKNOWN
    status = 422
    message = "There is no voucher with that code."


class VoucherNotStarted(VoucherRefused):
    code = ErrorCode.VOUCHER_NOT_STARTED
    status = 422
    message = "That voucher cannot be used yet."


class VoucherExpired(VoucherRefused):
    code = ErrorCode.VOUCHER_EXPIRED
    status = 422
    message = "That voucher has expired."


class VoucherUsedUp(VoucherRefused):
    code = ErrorCode.VOUCHER_USED_UP
    status = 422
    message = "That voucher has been used as many times as it can be."


class VoucherNotApplicable(VoucherRefused):
    code = ErrorCode.VOUCHER_NOT_APPLICABLE
    status = 422
    message = "That voucher does not apply to this cart."


class ShippingMethodUnknown(DomainError):
    code = ErrorCode.SHIPPING_METHOD_UNKNOWN
    status = 422
    message = "There is no shipping method with that code."


class ShippingMethodUnavailable(DomainError):
    """Details: `code`, `country` (and `weight_grams` when it cannot carry the goods)."""

    code = ErrorCode.SHIPPING_METHOD_UNAVAILABLE
    status = 422
    message = "That shipping method does not ship there."


class ShippingMethodRequired(DomainError):
    code = ErrorCode.SHIPPING_METHOD_REQUIRED
    status = 422
    message = "Choose a shipping method (PUT /api/cart/shipping-method): these goods are shipped."
