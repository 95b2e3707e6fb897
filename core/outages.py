"""Which failures are an outage of a service the code stands on, not its own fault."""

import smtplib

import redis
from django.db import InterfaceError, OperationalError

# The same work succeeds once the service answers again, so retrying is always right
# and dead-lettering or skipping never is. Deliberately narrow: an IntegrityError, a
# DataError, a redis ResponseError, a refused e-mail address or a plain OSError (a
# missing file) say something about the message or the code and stay failures.
# OperationalError also covers deadlocks, serialization failures and statement
# timeouts: all of them pass when the other transaction or the load is gone.
INFRASTRUCTURE_FAILURES: dict[str, tuple[type[BaseException], ...]] = {
    "database": (OperationalError, InterfaceError),
    "redis": (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError),  # BusyLoadingError is one
    # Refused, reset or timed-out sockets (an SMTP server among them); the mail
    # server hanging up or refusing the session before any address was sent.
    "network": (ConnectionError, TimeoutError, smtplib.SMTPServerDisconnected, smtplib.SMTPConnectError),
}


def failed_service(error: BaseException) -> str | None:
    """The service whose outage `error` is, or None when the code itself failed."""
    for service, kinds in INFRASTRUCTURE_FAILURES.items():
        if isinstance(error, kinds):
            return service
    return None
