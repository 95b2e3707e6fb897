from django.conf import settings
from django.db import models
from django.db.models import Q


class OrderStatus(models.TextChoices):
    PENDING_PAYMENT = "PENDING_PAYMENT", "Pending payment"
    PAID = "PAID", "Paid"
    SHIPPED = "SHIPPED", "Shipped"
    CANCELLED = "CANCELLED", "Cancelled"
    REFUNDED = "REFUNDED", "Refunded"


class OrderQuerySet(models.QuerySet):
    def pending_expired(self, now):
        return self.filter(status=OrderStatus.PENDING_PAYMENT, expires_at__lte=now)


class Order(models.Model):
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders")
    idempotency_key = models.CharField(max_length=64)
    # sha256 of the priced cart the key was first used with: a different cart
    # under the same key is refused rather than silently answered with this order.
    request_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=OrderStatus.choices, default=OrderStatus.PENDING_PAYMENT)
    total_amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField()
    paid_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    objects = OrderQuerySet.as_manager()

    class Meta:
        db_table = "orders"
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["customer", "idempotency_key"], name="order_idempotency_key_unique"),
            models.CheckConstraint(condition=Q(status__in=OrderStatus.values), name="order_status_valid"),
            models.CheckConstraint(condition=Q(total_amount__gte=0), name="order_total_not_negative"),
            models.CheckConstraint(condition=~Q(idempotency_key=""), name="order_idempotency_key_not_empty"),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=Q(status=OrderStatus.PENDING_PAYMENT),
                name="order_pending_expires_at",
            ),
            models.Index(fields=["customer", "-id"], name="order_customer_newest"),
        ]

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"


class OrderItem(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    product = models.ForeignKey("shop.Product", on_delete=models.PROTECT, db_column="sku", related_name="+")
    name = models.CharField(max_length=200)
    quantity = models.IntegerField()
    unit_price = models.BigIntegerField()  # the catalog price when the order was placed

    class Meta:
        db_table = "order_items"
        ordering = ["product_id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "product"], name="order_item_sku_unique"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="order_item_quantity_positive"),
            models.CheckConstraint(condition=Q(unit_price__gte=0), name="order_item_price_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.product_id}"

    @property
    def line_total(self) -> int:
        return self.quantity * self.unit_price
