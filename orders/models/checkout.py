"""Checkout's bookkeeping around an order: unpaid orders counted and their units held
per customer and address, and the ids a queue checkout answered with."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class PendingOrderCount(models.Model):
    """How many orders a customer has awaiting payment, so that one account cannot
    hoard stock with unpaid orders. Checkout takes a slot with a conditional UPDATE
    in the transaction that inserts the order (refused at
    MAX_PENDING_ORDERS_PER_CUSTOMER; orders/services/slots.py); payment
    and cancellation give it back in the statements that move the order."""

    customer = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    pending = models.IntegerField()

    class Meta:
        db_table = "order_pending_counts"
        constraints = [models.CheckConstraint(condition=Q(pending__gte=0), name="pending_order_count_not_negative")]

    def __str__(self) -> str:
        return f"customer {self.customer_id}: {self.pending} pending"


class UnpaidHold(models.Model):
    """Units of one SKU that unpaid orders hold, per holder: a customer
    ("customer:42") or a client address ("address:192.0.2.1"), so that neither
    one account nor many accounts from one address can keep a product off sale.
    Checkout adds an order's units within the holder's cap (orders/services/holds.py);
    the order leaving PENDING_PAYMENT takes them off."""

    holder = models.CharField(max_length=80)
    product = models.ForeignKey("shop.Product", on_delete=models.CASCADE, db_column="sku", related_name="+")
    units = models.IntegerField()
    cap = models.IntegerField()  # the cap in force when units last grew

    class Meta:
        db_table = "order_unpaid_holds"
        constraints = [
            models.UniqueConstraint(fields=["holder", "product"], name="unpaid_hold_unique"),
            models.CheckConstraint(condition=Q(units__gte=0), name="unpaid_hold_not_negative"),
            models.CheckConstraint(condition=Q(units__lte=F("cap")), name="unpaid_hold_within_cap"),
        ]

    def __str__(self) -> str:
        return f"{self.holder} holds {self.units} x {self.product_id}"


class QueuedOrderAlias(models.Model):
    """An id a queue checkout answered 202 with, for an Idempotency-Key whose
    order the writer found written under another id (Redis had forgotten the
    key and the shopper retried): that id leads to the written order."""

    queued_id = models.BigIntegerField(primary_key=True)
    order = models.ForeignKey("orders.Order", on_delete=models.CASCADE, related_name="+")

    class Meta:
        db_table = "order_queued_aliases"
        constraints = [models.CheckConstraint(condition=~Q(queued_id=F("order")), name="queued_alias_not_itself")]

    def __str__(self) -> str:
        return f"{self.queued_id} -> order {self.order_id}"
