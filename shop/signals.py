"""Any change to what the hot caches hold (products, flash sales, tokens, users) moves the
cache generation once the transaction commits; see config/hotcache.py.

New users and tokens are not in any cache yet (a new token is written
through to Redis), and a login only touches `last_login`: neither needs the
caches dropped. A deleted token or changed user also leaves Redis at once."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from redis.exceptions import RedisError
from rest_framework.authtoken.models import Token

from config.authentication import forget_tokens, remember_token
from config.hotcache import bump_generation_on_commit
from inventory.models import FlashSale
from shop.models import Product


def _bump_after_commit(**kwargs) -> None:
    bump_generation_on_commit()


def _token_saved(instance: Token, created: bool = False, **kwargs) -> None:
    transaction.on_commit(lambda: _best_effort(remember_token, instance))
    if not created:
        _bump_after_commit()


def _token_deleted(instance: Token, **kwargs) -> None:
    keys = [instance.key]  # read now: the deletion clears the primary key (the token key) afterwards
    transaction.on_commit(lambda: _best_effort(forget_tokens, keys))
    _bump_after_commit()


def _user_changed(instance, created: bool = False, update_fields=None, **kwargs) -> None:
    if created or (update_fields and set(update_fields) <= {"last_login"}):
        return
    keys = list(Token.objects.filter(user_id=instance.pk).values_list("key", flat=True))
    transaction.on_commit(lambda: _best_effort(forget_tokens, keys))
    _bump_after_commit()


def _best_effort(function, argument) -> None:
    try:
        function(argument)
    except RedisError:  # Redis down: the generation bump (or its absence) is the fallback
        pass


def connect() -> None:
    for model in (Product, FlashSale):
        post_save.connect(_bump_after_commit, sender=model, dispatch_uid=f"hotcache-save-{model.__name__}")
    for model in (Product, FlashSale, get_user_model()):
        post_delete.connect(_bump_after_commit, sender=model, dispatch_uid=f"hotcache-delete-{model.__name__}")
    post_save.connect(_token_saved, sender=Token, dispatch_uid="hotcache-token-save")
    post_delete.connect(_token_deleted, sender=Token, dispatch_uid="hotcache-token-delete")
    post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="hotcache-user-save")
