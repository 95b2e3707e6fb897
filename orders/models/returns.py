"""Returns: units of a shipped order sent back, line by line."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.formatting import format_units


class ReturnStatus(models.TextChoices):
    REQUESTED = "REQUESTED", "Requested"
    APPROVED = "APPROVED", "Approved"
    REJECTED = "REJECTED", "Rejected"
    RECEIVED = "RECEIVED", "Received"  # its units back, checked, and refunded


class ReturnCondition(models.TextChoices):
    """What staff found a returned line in when it arrived."""

    RESTOCK = "restock", "Back on sale"
    DAMAGED = "damaged", "Damaged: written off"


class Return(models.Model):
    """A shopper sending units of a shipped order back (orders/services/returns.py):
    REQUESTED, then APPROVED or REJECTED by staff, then RECEIVED line by line with
    a condition, which restocks or writes off the units and refunds them."""

    Status = ReturnStatus

    order = models.ForeignKey("orders.Order", on_delete=models.PROTECT, related_name="returns")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.REQUESTED)
    reason = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    refund = models.OneToOneField(
        "orders.Refund", null=True, blank=True, on_delete=models.PROTECT, related_name="for_return"
    )  # what receiving it paid back (none when nothing could be: a free order)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=ReturnStatus.values), name="return_status_valid"),
            models.CheckConstraint(
                condition=Q(status=ReturnStatus.REQUESTED) | Q(decided_at__isnull=False), name="return_decided_at"
            ),
            models.CheckConstraint(
                condition=Q(status=ReturnStatus.RECEIVED, received_at__isnull=False)
                | (~Q(status=ReturnStatus.RECEIVED) & Q(received_at__isnull=True) & Q(refund__isnull=True)),
                name="return_received_at_iff_received",
            ),
        ]
        indexes = [models.Index(fields=["status"], condition=Q(status=ReturnStatus.REQUESTED), name="return_open")]

    def __str__(self) -> str:
        return f"return {self.pk} of order {self.order_id} ({self.status})"


class ReturnLine(models.Model):
    return_request = models.ForeignKey(Return, on_delete=models.CASCADE, related_name="lines", db_column="return_id")
    item = models.ForeignKey("orders.OrderItem", on_delete=models.PROTECT, related_name="return_lines")
    quantity = models.IntegerField()
    condition = models.CharField(max_length=10, choices=ReturnCondition.choices, blank=True, default="")  # on receipt

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["return_request", "item"], name="return_line_item_unique"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="return_line_quantity_positive"),
            models.CheckConstraint(
                condition=Q(condition="") | Q(condition__in=ReturnCondition.values), name="return_line_condition_valid"
            ),
        ]

    def __str__(self) -> str:
        return format_units(self.quantity, self.item.product_id)  # the SKU, as the order's lines are named
