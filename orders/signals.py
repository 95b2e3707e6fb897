"""Every customer has a pending-order counter from the moment the account
exists, so that checkout takes a slot with one UPDATE (an account made
without signals, e.g. by a bulk load, gets its counter at its first checkout)."""

from django.contrib.auth import get_user_model
from django.db.models.signals import post_save

from orders.models import PendingOrderCount


def _account_created(instance, created: bool = False, raw: bool = False, **kwargs) -> None:
    if created and not raw:
        PendingOrderCount.objects.get_or_create(customer_id=instance.pk, defaults={"pending": 0})


def connect() -> None:
    post_save.connect(_account_created, sender=get_user_model(), dispatch_uid="orders-pending-counter")
