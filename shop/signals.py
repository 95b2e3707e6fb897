"""Any change to what the hot caches hold (products, flash sales, tokens, users) moves the
cache generation once the transaction commits; see config/hotcache.py.

New users and tokens are not in any cache yet, and a login only touches
`last_login`: neither needs the caches dropped."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from rest_framework.authtoken.models import Token

from config.hotcache import bump_generation
from inventory.models import FlashSale
from shop.models import Product


def _bump_after_commit(**kwargs) -> None:
    transaction.on_commit(bump_generation)


def _bump_after_change(created: bool = False, update_fields=None, **kwargs) -> None:
    if created or (update_fields and set(update_fields) <= {"last_login"}):
        return
    _bump_after_commit()


def connect() -> None:
    for model in (Product, FlashSale):
        post_save.connect(_bump_after_commit, sender=model, dispatch_uid=f"hotcache-save-{model.__name__}")
    for model in (Product, FlashSale, Token, get_user_model()):
        post_delete.connect(_bump_after_commit, sender=model, dispatch_uid=f"hotcache-delete-{model.__name__}")
    for model in (Token, get_user_model()):
        post_save.connect(_bump_after_change, sender=model, dispatch_uid=f"hotcache-save-{model.__name__}")
