"""Any change to what the hot caches hold (products, tokens, users; flash sales in
inventory/signals.py) moves the
cache generation: before the transaction commits, so that a change no cache can hear of
fails instead (Redis down: 503), and again after; see core/hotcache.py.

New users and tokens are not in any cache yet (a new token is written through
to Redis), and a login only touches `last_login`: neither needs the caches
dropped. A deleted token, a changed password or a changed user leaves Redis
before the change commits. A password change also deletes the user's tokens:
whoever held one must log in again."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_save
from django.utils import timezone
from knox.models import AuthToken
from redis.exceptions import RedisError

from core.authentication import forget_tokens, remember_tokens
from core.hotcache import bump_generation_on_commit
from shop.models import Product


def _bump(**kwargs) -> None:
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


def _password_changing(instance, raw=False, update_fields=None, **kwargs) -> None:
    if raw or instance.pk is None or (update_fields is not None and "password" not in update_fields):
        return
    stored = get_user_model().objects.filter(pk=instance.pk).values_list("password", flat=True).first()
    instance._password_changed = stored is not None and stored != instance.password


def _user_changed(instance, created: bool = False, update_fields=None, **kwargs) -> None:
    if created or (update_fields and set(update_fields) <= {"last_login"}):
        return
    if getattr(instance, "_password_changed", False):
        instance._password_changed = False
        keep = getattr(instance, "_keep_token_digest", None)  # the session that changed it (change_password)
        AuthToken.objects.filter(user_id=instance.pk).exclude(digest=keep).delete()  # each leaves Redis (above)
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
    post_save.connect(_bump, sender=Product, dispatch_uid="hotcache-save-Product")
    for model in (Product, get_user_model()):
        post_delete.connect(_bump, sender=model, dispatch_uid=f"hotcache-delete-{model.__name__}")
    post_save.connect(_token_saved, sender=AuthToken, dispatch_uid="hotcache-token-save")
    post_delete.connect(_token_deleted, sender=AuthToken, dispatch_uid="hotcache-token-delete")
    pre_save.connect(_password_changing, sender=get_user_model(), dispatch_uid="tokens-password-change")
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="hotcache-user-save")
