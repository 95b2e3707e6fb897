"""Accounts beyond Django's user: password-reset requests, e-mail verification,
e-mail change, and the e-mails that carry their links (docs/architecture.md,
"Accounts"). The password itself changes only in shop/services.py.

Links point at the storefront (SHOP_PUBLIC_URL), which passes `uid` and `token`
on to the API. Both kinds of token are HMACs of the account's state, stored
nowhere: a reset token (Django's default_token_generator) covers the password
hash, so it dies once the password changes; a verification token covers the
address and when that address was verified, so it dies once it has been
followed or the address is no longer the one asked for. Both die after
PASSWORD_RESET_TIMEOUT.

Each e-mail sent is logged at INFO on "shop.accounts" with its kind and its
recipient (never its link): the log is where staff see account e-mails."""

import hashlib
import json
import logging
import math
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from smtplib import SMTPException
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.tokens import PasswordResetTokenGenerator, default_token_generator
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from core import ratelimit
from core.exceptions import RateLimited
from core.locks import for_update
from shop.established import account_established_changed
from shop.exceptions import EmailNotVerified, InvalidCredentials, InvalidToken, NothingToVerify, WrongPassword
from shop.models import Account

User = get_user_model()
logger = logging.getLogger("shop.accounts")

PASSWORD_RESET = "password_reset"
VERIFY_EMAIL = "verify_email"
MAX_PK = 2**63 - 1  # a bigint: a uid decoding to more names nobody


@dataclass(frozen=True)
class AccountMail:
    kind: str  # PASSWORD_RESET or VERIFY_EMAIL
    to: str
    subject: str
    body: str


def send_account_mails(mails: Iterable[AccountMail]) -> None:
    """Send each mail, logging it (kind and recipient, never the link). A mail
    server that refuses or cannot be reached is logged and skipped: the shopper
    can ask again; the request that made the link has been answered already."""
    for mail in mails:
        extra = {"email_kind": mail.kind, "recipient": mail.to}
        try:
            send_mail(mail.subject, mail.body, None, [mail.to])
        except (SMTPException, OSError):
            logger.exception("account e-mail not sent: %s to %s", mail.kind, mail.to, extra=extra)
        else:
            logger.info("account e-mail sent: %s to %s", mail.kind, mail.to, extra=extra)


def _link(path: str, *, customer_id: int | None, token: str) -> str:
    uid = urlsafe_base64_encode(force_bytes(customer_id))
    return f"{settings.SHOP_PUBLIC_URL.rstrip('/')}/{path}?{urlencode({'uid': uid, 'token': token})}"


def _customer_id(uid: str) -> int | None:
    """The primary key a link's `uid` names, or None for anything that is not one."""
    try:
        pk = int(urlsafe_base64_decode(uid).decode())
    except (ValueError, TypeError):  # bad base64, bad UTF-8, not a number
        return None
    return pk if 0 < pk <= MAX_PK else None


def _count(*, scope: str, ident: str) -> None:
    wait = ratelimit.hit(scope=scope, ident=ident)
    if wait is not None:
        raise RateLimited(retry_after=max(1, math.ceil(wait)))


def _same_address(a: str, b: str) -> bool:
    """Case-insensitive as Unicode means it (Django's PasswordResetForm does the
    same): the database's iexact may match addresses that only look alike."""
    return unicodedata.normalize("NFKC", a).casefold() == unicodedata.normalize("NFKC", b).casefold()


def _lock_user(customer_id: int | None) -> AbstractBaseUser | None:
    """The active user, its row locked: every writer of a shopper's account state
    (verification, e-mail change, reset) takes this lock first, so two links
    followed at once are applied one after the other, the second seeing the
    first's change (and refused when it killed its token)."""
    if customer_id is None:
        return None
    return for_update(User.objects.filter(pk=customer_id, is_active=True)).first()


# --- Password reset ------------------------------------------------------------------------------------------

# Stands in when no account has the address, so that the request does the same work
# (a token computed) either way. It is never saved and its token is never sent.
_NOBODY = User(pk=0, email="", password="!")


def request_password_reset(*, email: str, client_address: str) -> list[AccountMail]:
    """The reset e-mails to send for `email`: one for each active, not erased
    account with that address and a usable password (several accounts may share
    one), none for an unknown address. Counted first against the client address's
    limit, then the address's (RateLimited, 429, either way, known or not).

    The same work whatever the answer: the limits, one query, a token made. The
    caller sends the mails once the client has its answer, so that neither the
    answer nor its time tells whether the address has an account."""
    _count(scope="password_reset_address", ident=f"ip:{client_address}")
    normalized = unicodedata.normalize("NFKC", email.strip()).casefold()
    _count(scope="password_reset", ident="email:" + hashlib.sha256(normalized.encode()).hexdigest())
    candidates = User.objects.filter(email__iexact=email.strip(), is_active=True, account__erased_at__isnull=True)
    users = [
        user for user in candidates.order_by("pk") if user.has_usable_password() and _same_address(email, user.email)
    ]
    mails = [_password_reset_mail(user) for user in users]
    if not users:
        default_token_generator.make_token(_NOBODY)
    return mails


def _password_reset_mail(user: AbstractBaseUser) -> AccountMail:
    link = _link("reset-password", customer_id=user.pk, token=default_token_generator.make_token(user))
    minutes = settings.PASSWORD_RESET_TIMEOUT // 60
    body = (
        f"Hello {user.get_username()},\n\n"
        f"Someone asked to reset the password of your account. To choose a new one, open:\n\n{link}\n\n"
        f"The link works once, for {minutes} minutes. If you did not ask for it, ignore this e-mail: "
        "your password stays as it is.\n"
    )
    return AccountMail(kind=PASSWORD_RESET, to=user.email, subject="Reset your password", body=body)


def password_reset_user(*, uid: str, token: str) -> AbstractBaseUser:
    """The user a reset link names, its row locked (call inside a transaction),
    when the token is still good for it; InvalidToken otherwise (bad uid, bad or
    used token, expired, inactive or erased user)."""
    user = _lock_user(_customer_id(uid))
    if user is None or Account.objects.filter(customer_id=user.pk, erased_at__isnull=False).exists():
        raise InvalidToken()
    if not default_token_generator.check_token(user, token):
        raise InvalidToken()
    return user


# --- E-mail verification -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verifying:
    """What an e-mail verification token is about: a shopper, the address to
    verify, and when that address was verified (None while it is not)."""

    customer_id: int
    address: str
    verified_at: datetime | None


def _verifying(customer_id: int, address: str, account: Account | None) -> Verifying:
    verified = account is not None and account.verified_email == address
    return Verifying(customer_id, address, account.email_verified_at if verified else None)


class EmailVerificationTokenGenerator(PasswordResetTokenGenerator):
    """Django's reset tokens (HMAC with SECRET_KEY and its fallbacks, a timestamp,
    PASSWORD_RESET_TIMEOUT) over a `Verifying` instead of a user: the hash covers
    the address, so a link verifies only the address it was sent to, and when it
    was verified, so a link dies once followed."""

    key_salt = "shop.accounts.EmailVerificationTokenGenerator"

    def _make_hash_value(self, subject: Verifying, timestamp: int) -> str:
        verified_at = subject.verified_at.isoformat() if subject.verified_at else ""
        # JSON, not concatenation: user 1 with "2a@x.example" must not hash as user 12 with "a@x.example".
        return json.dumps([subject.customer_id, subject.address, verified_at, timestamp])


email_verification_token = EmailVerificationTokenGenerator()


def verification_mail(*, customer_id: int, username: str, address: str, account: Account | None) -> AccountMail:
    """The e-mail with the link that verifies `address` for the shopper."""
    token = email_verification_token.make_token(_verifying(customer_id, address, account))
    link = _link("verify-email", customer_id=customer_id, token=token)
    minutes = settings.PASSWORD_RESET_TIMEOUT // 60
    body = (
        f"Hello {username},\n\nTo confirm that {address} is your e-mail address at the shop, open:\n\n{link}\n\n"
        f"The link works once, for {minutes} minutes. If you did not ask for it, ignore this e-mail.\n"
    )
    return AccountMail(kind=VERIFY_EMAIL, to=address, subject="Confirm your e-mail address", body=body)


def send_verification_on_commit(*, user: AbstractBaseUser, address: str, account: Account | None = None) -> None:
    """The link for `address` mailed once the transaction commits (none if it rolls back)."""
    mail = verification_mail(customer_id=user.pk, username=user.get_username(), address=address, account=account)
    transaction.on_commit(lambda: send_account_mails([mail]))


@transaction.atomic
def verify_email(*, uid: str, token: str) -> Account:
    """Follow a verification link: its address becomes the verified one, now; a
    pending address (PUT /api/auth/me/email) also becomes the user's e-mail and
    is no longer pending. A link verifies the address it was sent to while it is
    the user's e-mail or the pending one; InvalidToken otherwise (bad, used,
    expired, an address replaced since, an inactive or erased user)."""
    user = _lock_user(_customer_id(uid))
    if user is None:
        raise InvalidToken()
    account = Account.objects.filter(customer_id=user.pk).first()
    if account is not None and account.erased_at is not None:
        raise InvalidToken()
    pending = account.pending_email if account is not None else ""
    candidates = [address for address in dict.fromkeys((pending, user.email)) if address]
    for address in candidates:
        if email_verification_token.check_token(_verifying(user.pk, address, account), token):
            break
    else:
        raise InvalidToken()
    values = {"verified_email": address, "email_verified_at": timezone.now()}
    if address == pending:
        values["pending_email"] = ""
        if user.email != address:
            user.email = address
            # Through save(): the token caches holding the user's old e-mail are dropped (shop/signals.py).
            user.save(update_fields=["email"])
    account, _ = Account.objects.update_or_create(customer_id=user.pk, defaults=values)
    # The token caches keep "e-mail verified" with the user (shop/established.py): they forget it.
    transaction.on_commit(lambda: account_established_changed(user.pk))
    logger.info("e-mail verified for customer %s", user.pk, extra={"customer_id": user.pk})
    return account


def resend_verification(*, user: AbstractBaseUser) -> str:
    """Mail a new verification link, for the pending address if there is one,
    else for the user's e-mail if it is not verified (NothingToVerify, 409,
    otherwise). Counted against the shopper's limit first (RateLimited, 429).
    Returns the address the link went to."""
    _count(scope="verify_email", ident=f"user:{user.pk}")
    account = Account.objects.filter(customer_id=user.pk).first()
    state = _email_state(user.email, account)
    address = state.pending_email or ("" if state.email_verified else user.email)
    if not address:
        raise NothingToVerify()
    mail = verification_mail(customer_id=user.pk, username=user.get_username(), address=address, account=account)
    send_account_mails([mail])
    return address


# --- E-mail change -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmailState:
    email: str
    email_verified: bool
    pending_email: str


def _email_state(email: str, account: Account | None) -> EmailState:
    if account is None:
        return EmailState(email=email, email_verified=False, pending_email="")
    verified = bool(email) and account.verified_email == email
    return EmailState(email=email, email_verified=verified, pending_email=account.pending_email)


def email_state(*, user: AbstractBaseUser) -> EmailState:
    """The shopper's e-mail, whether it is verified, and the address pending
    verification ("" when none): one primary-key lookup of the account."""
    account = Account.objects.filter(customer_id=user.pk).only("verified_email", "pending_email").first()
    return _email_state(user.email, account)


@transaction.atomic
def change_email(*, user: AbstractBaseUser, password: str, email: str) -> EmailState:
    """Ask for a new e-mail address (the current password required: WrongPassword):
    it is kept pending and a link goes to it; the user's e-mail stays what it
    was until the link is followed. Asking for the current address again drops
    a pending change (and mails a link for the current one if it is not
    verified). The mail counts against the shopper's verification limit
    (RateLimited, 429, nothing changed)."""
    if not user.check_password(password):
        raise WrongPassword()
    _count(scope="verify_email", ident=f"user:{user.pk}")
    locked = _lock_user(user.pk)
    if locked is None:  # deactivated since the request was authenticated
        raise InvalidCredentials()
    account = Account.objects.filter(customer_id=user.pk).first()
    pending = "" if email == locked.email else email
    Account.objects.update_or_create(customer_id=user.pk, defaults={"pending_email": pending})
    state = _email_state(locked.email, account)
    address = pending or ("" if state.email_verified else locked.email)
    if address:
        send_verification_on_commit(user=locked, address=address, account=account)
    logger.info("e-mail change asked by customer %s", user.pk, extra={"customer_id": user.pk})
    return EmailState(email=locked.email, email_verified=state.email_verified, pending_email=pending)


# --- Checkout ------------------------------------------------------------------------------------------------


def email_verified(*, customer_id: int) -> bool:
    """Whether the shopper's current e-mail is the one they verified (one query)."""
    return (
        Account.objects.filter(customer_id=customer_id, erased_at__isnull=True, verified_email=F("customer__email"))
        .exclude(verified_email="")
        .exists()
    )


def require_verified_email(*, customer_id: int) -> None:
    """For checkout: EmailNotVerified (403) when REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT
    is on and the shopper's e-mail is not verified. No query when it is off."""
    if settings.REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT and not email_verified(customer_id=customer_id):
        raise EmailNotVerified()
