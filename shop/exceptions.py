from core.exceptions import DomainError


class UsernameTaken(DomainError):
    code = "username_taken"
    status = 409
    message = "That username is already taken."


class InvalidCredentials(DomainError):
    code = "invalid_credentials"
    status = 401
    message = "Unable to log in with the credentials provided."
