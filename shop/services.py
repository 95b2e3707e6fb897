import json
import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from knox.models import AuthToken
from redis.exceptions import RedisError

from core.exceptions import CacheUnavailable
from core.sharding import customer_bucket, customer_redis, tagged
from shop.accounts import password_reset_user, send_verification_on_commit
from shop.exceptions import InvalidCredentials, UsernameTaken, WrongPassword
from shop.models import ADDRESS_FIELDS, Address

User = get_user_model()
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IssuedToken:
    token: str  # the only moment the token itself exists: the database keeps its digest
    expiry: datetime
    user_id: int


def issue_token_for(user: AbstractBaseUser) -> IssuedToken:
    """A new token for one more session of the user (knox: digest stored, expiry
    set); expired ones go, and so do the oldest beyond API_TOKENS_PER_USER."""
    AuthToken.objects.filter(user=user, expiry__lt=timezone.now()).delete()
    instance, token = AuthToken.objects.create(user=user)
    keep = AuthToken.objects.filter(user=user).order_by("-created").values("digest")[: settings.API_TOKENS_PER_USER]
    AuthToken.objects.filter(user=user).exclude(digest__in=keep).delete()
    return IssuedToken(token=token, expiry=instance.expiry, user_id=user.pk)


@transaction.atomic
def revoke_token(*, token: AuthToken) -> None:
    """Log one session out. Its caches are dropped before the deletion commits
    (shop/signals.py): if Redis cannot be told, this fails and the token stays."""
    AuthToken.objects.filter(digest=token.digest).delete()


@transaction.atomic
def register_customer(*, username: str, password: str, email: str = "") -> IssuedToken:
    """Create a shopper and their API token. Django's password validators apply.
    With an e-mail, a link to verify it is mailed once the shopper exists."""
    candidate = User(username=username, email=email)
    validate_password(password, user=candidate)  # raises ValidationError -> 400
    candidate.set_password(password)
    try:
        with transaction.atomic():
            candidate.save()
    except IntegrityError:
        raise UsernameTaken(username=username) from None
    if email:
        send_verification_on_commit(user=candidate, address=email)
    return issue_token_for(candidate)


@transaction.atomic
def issue_token(*, username: str, password: str) -> IssuedToken:
    user = authenticate(username=username, password=password)
    if user is None:
        raise InvalidCredentials()
    return issue_token_for(user)


@transaction.atomic
def set_password(
    *, user: AbstractBaseUser, password: str | None, keep_token: AuthToken | None = None
) -> AbstractBaseUser:
    """Set the user's password (None: no password login at all) and revoke every
    token of the user but `keep_token`, the one of the session that changed it:
    whoever held another must log in again. Each token leaves Redis before the
    change commits (shop/signals.py): if Redis cannot be told, nothing changes.
    The caller has validated the password. Every change of an existing user's
    password goes through here (the API's, the admin's): no signal revokes tokens."""
    revoke_tokens(user=user, keep_token=keep_token)
    if password is None:
        user.set_unusable_password()
    else:
        user.set_password(password)
    user.save(update_fields=["password"])  # the kept token leaves Redis too, and the generation moves
    return user


@transaction.atomic
def revoke_tokens(*, user: AbstractBaseUser, keep_token: AuthToken | None = None) -> None:
    """Every API token of the user but `keep_token` deleted, each out of Redis
    before the deletion commits (shop/signals.py)."""
    tokens = AuthToken.objects.filter(user_id=user.pk)
    if keep_token is not None:
        tokens = tokens.exclude(digest=keep_token.digest)
    tokens.delete()


@transaction.atomic
def change_password(*, user: AbstractBaseUser, current_token: AuthToken, old_password: str, new_password: str) -> None:
    """The password changes when the old one is given; every other token of the
    user is revoked, the one in use keeps working."""
    if not user.check_password(old_password):
        raise WrongPassword()
    validate_password(new_password, user=user)  # raises ValidationError -> 400
    set_password(user=user, password=new_password, keep_token=current_token)


@transaction.atomic
def reset_password(*, uid: str, token: str, new_password: str) -> AbstractBaseUser:
    """Follow a password-reset link (shop/accounts.py mailed it): InvalidToken
    when it is bad, used or expired; else the new password, validated (400 on
    `new_password`), set through set_password, which revokes every token. The
    password hash changes, and the link with it is dead."""
    user = password_reset_user(uid=uid, token=token)  # its row locked: a link followed twice at once works once
    try:
        validate_password(new_password, user=user)
    except ValidationError as error:
        raise ValidationError({"new_password": error.messages}) from None
    return set_password(user=user, password=new_password)


# The saved address, kept in Redis beside the cart so that checkout reads it in
# the admission script's round-trip instead of a statement of its own. The
# database is the truth: a key Redis lost (evicted, restarted) is filled again
# from it; "null" remembers that a shopper has none.
ADDRESS_KEPT_SECONDS = 24 * 3600


def address_key(customer_id: int) -> str:
    """Beside the shopper's cart (checkout's admission script reads both)."""
    return tagged("address", customer_bucket(customer_id), str(customer_id))


def default_address(*, customer_id: int, cached: bytes | None = None) -> dict | None:
    """The shopper's saved address as a dict of ADDRESS_FIELDS, or None. `cached`:
    what Redis holds under address_key (checkout's admission script read it);
    None when Redis has nothing, then the database answers and Redis learns it."""
    if cached is not None:
        return json.loads(cached)
    row = Address.objects.filter(customer_id=customer_id).values(*ADDRESS_FIELDS).first()
    try:  # NX: an address saved meanwhile has set the key after its commit, and wins
        customer_redis().set(address_key(customer_id), json.dumps(row), nx=True, ex=ADDRESS_KEPT_SECONDS)
    except RedisError:
        logger.warning("could not cache the saved address of customer %s", customer_id, exc_info=True)
    return row


def set_default_address(*, customer_id: int, address: dict) -> dict:
    """Save the shopper's address. Redis forgets the old one before the database
    changes (CacheUnavailable, nothing saved, when it cannot) and learns the new
    one after the commit: a checkout never ships to an address replaced before it."""
    values = {name: address.get(name, "") for name in ADDRESS_FIELDS}
    key, redis = address_key(customer_id), customer_redis()
    try:
        redis.delete(key)
    except RedisError as error:
        raise CacheUnavailable() from error
    with transaction.atomic():
        Address.objects.update_or_create(customer_id=customer_id, defaults=values)
        transaction.on_commit(lambda: _remember_address(redis, key, values))
    return values


def _remember_address(redis, key: str, values: dict) -> None:
    try:
        redis.set(key, json.dumps(values), ex=ADDRESS_KEPT_SECONDS)
    except RedisError:  # the key stays deleted: the next checkout reads the database
        logger.warning("could not cache the saved address under %s", key, exc_info=True)
