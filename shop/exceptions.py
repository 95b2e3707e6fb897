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
