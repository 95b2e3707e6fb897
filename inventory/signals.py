"""A flash sale started, changed or ended moves the hot-cache generation (checkout
caches the list of sales), as shop/signals.py does for products and users."""

from django.db.models.signals import post_delete, post_save

from core.hotcache import bump_generation_on_commit
from inventory.models import FlashSale


def _bump(**kwargs) -> None:
    bump_generation_on_commit()


def connect() -> None:
    post_save.connect(_bump, sender=FlashSale, dispatch_uid="hotcache-save-FlashSale")
    post_delete.connect(_bump, sender=FlashSale, dispatch_uid="hotcache-delete-FlashSale")
