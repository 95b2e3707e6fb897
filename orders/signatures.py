"""The payment provider's webhook signature:
`Payment-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`."""

import hashlib
import hmac
import re
import time

from orders.exceptions import InvalidSignature

TOLERANCE_SECONDS = 300
# ASCII only and bounded: str.isdigit() accepts "²", int() refuses 5,000 digits,
# a float cannot hold 400, and hmac.compare_digest() refuses a non-ASCII str.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def sign(*, body: bytes, secret: str, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_signature(*, header: str | None, body: bytes, secret: str, now: float | None = None) -> None:
    """Raise InvalidSignature unless the header signs this exact body, recently.
    No secret (PAYMENT_PROVIDER=stripe leaves the simulator's unset) refuses all:
    anyone can compute an HMAC under an empty key."""
    if not header or not secret:
        raise InvalidSignature()
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    timestamp, given = parts.get("t", ""), parts.get("v1", "")
    if not _TIMESTAMP.fullmatch(timestamp) or not _DIGEST.fullmatch(given):
        raise InvalidSignature()
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise InvalidSignature()
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, given):
        raise InvalidSignature()
