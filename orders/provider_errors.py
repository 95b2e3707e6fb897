"""What a payment provider's adapter raises, whichever provider it speaks to."""


class ProviderUnavailable(ConnectionError):
    """The provider is down, timing out, rate-limiting or answering 5xx: the same
    call later (the consumers retry it with backoff; a shopper gets 503)."""


class ProviderRefused(Exception):
    """The provider answered 4xx: this call will never succeed as it is."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code  # the provider's reason, for staff (e.g. a card's decline code)


class AuthorizationLapsed(ProviderRefused):
    """A capture refused because the authorization it would take has ended (the
    card issuer's hold lapsed, or the provider cancelled it): nothing to take."""
