"""Any change to what the hot caches hold (products, promotions and their SKUs,
tax classes and rates, shipping zones, methods and bands, tokens, users; flash
sales in inventory/signals.py) moves the
cache generation: before the transaction commits, so that a change no cache can hear of
fails instead (Redis down: 503), and again after; see core/hotcache.py.

New users and tokens are not in any cache yet (a new token is written through
to Redis), and a login only touches `last_login`: neither needs the caches
dropped. A deleted token or a changed user (its tokens) leaves Redis before the
change commits. Revoking tokens is no signal's business: a password change
deletes them explicitly (shop.services.set_password, called by the API and the
admin), and each deletion leaves Redis here. A voucher's `uses` is not cached:
redemptions (UPDATEs, no signal) move nothing; ending promotions by UPDATE moves
the generation itself (shop/promotions.py)."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.utils import timezone
from knox.models import AuthToken
from redis.exceptions import RedisError

from core.authentication import forget_tokens, remember_tokens
from core.hotcache import bump_generation_on_commit
from shop.models import (
    Product,
    Promotion,
    ShippingMethod,
    ShippingRateBand,
    ShippingZone,
    TaxClass,
    TaxRate,
)

# The cart and checkout keep rates and methods in process memory (shop/selectors.py, charges).
CACHED_MODELS = (Product, Promotion, TaxClass, TaxRate, ShippingZone, ShippingMethod, ShippingRateBand)


def _bump(**kwargs) -> None:
    bump_generation_on_commit()


def _promotion_products_changed(action: str, **kwargs) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        bump_generation_on_commit()


def _token_saved(instance: AuthToken, created: bool = False, **kwargs) -> None:
    if created:
        transaction.on_commit(lambda: _best_effort(remember_tokens, [instance]))


def _token_deleted(instance: AuthToken, **kwargs) -> None:
    if instance.expiry is not None and instance.expiry <= timezone.now():
        return  # refused everywhere already: every cache checks the expiry
    forget_tokens([instance.digest])  # RedisError: the deletion fails; the token is not left half-revoked
    transaction.on_commit(lambda: _best_effort(forget_tokens, [instance.digest]))  # a refill in between
    bump_generation_on_commit()


def _user_changed(instance, created: bool = False, update_fields=None, **kwargs) -> None:
    if created or (update_fields and set(update_fields) <= {"last_login"}):
        return
    digests = list(AuthToken.objects.filter(user_id=instance.pk).values_list("digest", flat=True))
    forget_tokens(digests)
    transaction.on_commit(lambda: _best_effort(forget_tokens, digests))
    bump_generation_on_commit()


def _best_effort(function, argument) -> None:
    try:
        function(argument)
    except RedisError:  # Redis down: the generation bump (or its absence) is the fallback
        pass


def connect() -> None:
    for model in CACHED_MODELS:
        post_save.connect(_bump, sender=model, dispatch_uid=f"hotcache-save-{model.__name__}")
    for model in (*CACHED_MODELS, get_user_model()):
        post_delete.connect(_bump, sender=model, dispatch_uid=f"hotcache-delete-{model.__name__}")
    m2m_changed.connect(
        _promotion_products_changed, sender=Promotion.products.through, dispatch_uid="hotcache-promotion-products"
    )
    post_save.connect(_token_saved, sender=AuthToken, dispatch_uid="hotcache-token-save")
    post_delete.connect(_token_deleted, sender=AuthToken, dispatch_uid="hotcache-token-delete")
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="hotcache-user-save")
