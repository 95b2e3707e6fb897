import secrets
from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.db import IntegrityError, transaction
from django.utils import timezone
from knox.models import AuthToken

from inventory.services import receive_stock
from shop.demo import DEMO_PRODUCTS
from shop.exceptions import InvalidCredentials, UsernameTaken
from shop.models import Product

User = get_user_model()


@dataclass(frozen=True)
class IssuedToken:
    token: str  # the only moment the token itself exists: the database keeps its digest
    expiry: datetime


def _issue_token(user: AbstractBaseUser) -> IssuedToken:
    """A new token for one more session of the user (knox: digest stored, expiry
    set); expired ones go, and so do the oldest beyond API_TOKENS_PER_USER."""
    AuthToken.objects.filter(user=user, expiry__lt=timezone.now()).delete()
    instance, token = AuthToken.objects.create(user=user)
    keep = AuthToken.objects.filter(user=user).order_by("-created").values("digest")[: settings.API_TOKENS_PER_USER]
    AuthToken.objects.filter(user=user).exclude(digest__in=keep).delete()
    return IssuedToken(token=token, expiry=instance.expiry)


@transaction.atomic
def revoke_token(*, token: AuthToken) -> None:
    """Log one session out. Its caches are dropped before the deletion commits
    (shop/signals.py): if Redis cannot be told, this fails and the token stays."""
    AuthToken.objects.filter(digest=token.digest).delete()


@transaction.atomic
def register_customer(*, username: str, password: str, email: str = "") -> IssuedToken:
    """Create a shopper and their API token. Django's password validators apply."""
    candidate = User(username=username, email=email)
    validate_password(password, user=candidate)  # raises ValidationError -> 400
    candidate.set_password(password)
    try:
        with transaction.atomic():
            candidate.save()
    except IntegrityError:
        raise UsernameTaken(username=username) from None
    return _issue_token(candidate)


@transaction.atomic
def issue_token(*, username: str, password: str) -> IssuedToken:
    user = authenticate(username=username, password=password)
    if user is None:
        raise InvalidCredentials()
    return _issue_token(user)


@dataclass(frozen=True)
class DemoLogin:
    role: str
    username: str
    password: str


@dataclass(frozen=True)
class DemoSeed:
    products_created: int
    products_total: int
    logins: list[DemoLogin]
    shopper_token: str


DEMO_ADMIN = DemoLogin("staff (admin)", "admin", "admin")
DEMO_STOCK_MANAGER = DemoLogin("stock manager", "stockmanager", "stockmanager")
DEMO_ORDER_MANAGER = DemoLogin("order manager", "ordermanager", "ordermanager")
DEMO_SHOPPER = DemoLogin("shopper", "shopper", "shopper")


def _ensure_user(login: DemoLogin, *, random_password: bool, **flags) -> DemoLogin:
    """The demo user, created if missing; the login as it can be used (the password
    shown only when this call set it)."""
    user, created = User.objects.get_or_create(username=login.username, defaults=flags)
    if not created:
        return replace(login, password="(unchanged)")
    password = secrets.token_urlsafe(12) if random_password else login.password
    user.set_password(password)
    user.save(update_fields=["password"])
    return replace(login, password=password)


@transaction.atomic
def seed_demo(*, random_passwords: bool = False) -> DemoSeed:
    """Idempotent: existing products, stock and users are left as they are.
    `random_passwords`: new demo users get random passwords (outside DEBUG)."""
    created = 0
    for sku, name, price, stock in DEMO_PRODUCTS:
        _, is_new = Product.objects.get_or_create(sku=sku, defaults={"name": name, "price": price})
        if is_new:
            created += 1
            if stock:
                receive_stock(sku=sku, quantity=stock, note="demo seed")
    logins = [
        _ensure_user(
            DEMO_ADMIN, random_password=random_passwords, is_staff=True, is_superuser=True, email="admin@example.com"
        )
    ]
    for login, group in ((DEMO_STOCK_MANAGER, "Stock managers"), (DEMO_ORDER_MANAGER, "Order managers")):
        logins.append(
            _ensure_user(login, random_password=random_passwords, is_staff=True, email=f"{login.username}@example.com")
        )
        User.objects.get(username=login.username).groups.add(Group.objects.get(name=group))
    logins.append(_ensure_user(DEMO_SHOPPER, random_password=random_passwords, email="shopper@example.com"))
    token = _issue_token(User.objects.get(username=DEMO_SHOPPER.username))
    return DemoSeed(created, Product.objects.count(), logins, token.token)
