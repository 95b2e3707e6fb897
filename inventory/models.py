from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.functions import Coalesce
from django.utils import timezone

# Stock figures are PostgreSQL integers: no count of units may pass this.
MAX_UNITS = 2**31 - 1


class StockMovementReason(models.TextChoices):
    RECEIVED = "received", "Received"
    WRITTEN_OFF = "written_off", "Written off"
    CORRECTION = "correction", "Correction"
    RETURNED = "returned", "Returned by a shopper"
    DAMAGED = "damaged", "Returned damaged: written off"


class ShipmentStatus(models.TextChoices):
    REQUESTED = "REQUESTED", "Requested"
    SHIPPED = "SHIPPED", "Shipped"
    CANCELLED = "CANCELLED", "Cancelled"  # its order was cancelled before it left


class FlashSaleMode(models.TextChoices):
    DIRECT = "direct", "Direct"
    QUEUE = "queue", "Queue"


class StockQuerySet(models.QuerySet):
    """The low-stock rule, the only copy of it (the admin's filter and flag, the
    stock managers' email): a SKU is low when fewer units are available than its
    threshold, its own `low_stock_threshold`, else settings.LOW_STOCK_THRESHOLD."""

    def with_low_stock(self) -> "StockQuerySet":
        """Annotated with `threshold` (the one in force) and `is_low`."""
        threshold = Coalesce("low_stock_threshold", settings.LOW_STOCK_THRESHOLD)
        return self.annotate(threshold=threshold, is_low=models.Q(available__lt=threshold))

    def low(self) -> "StockQuerySet":
        return self.with_low_stock().filter(is_low=True)

    def not_low(self) -> "StockQuerySet":
        return self.with_low_stock().filter(is_low=False)


class Stock(models.Model):
    """Units of one SKU: on sale (`available`) and held by unpaid or unshipped
    orders (`reserved`). Changed only by conditional F() updates in services."""

    product = models.OneToOneField(
        "shop.Product", primary_key=True, on_delete=models.PROTECT, db_column="sku", related_name="stock"
    )
    available = models.IntegerField(default=0)
    reserved = models.IntegerField(default=0)
    shipped = models.IntegerField(default=0)
    # Below this many available units the SKU is low (StockQuerySet): flagged in
    # the admin, and the stock managers are told once a day.
    low_stock_threshold = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Below this many available units the SKU is low: flagged in the list, and the stock managers "
        "are emailed. Blank: the default, the LOW_STOCK_THRESHOLD setting.",
    )

    objects = StockQuerySet.as_manager()

    class Meta:
        db_table = "inventory"
        constraints = [
            models.CheckConstraint(condition=models.Q(available__gte=0), name="stock_available_not_negative"),
            models.CheckConstraint(condition=models.Q(reserved__gte=0), name="stock_reserved_not_negative"),
            models.CheckConstraint(condition=models.Q(shipped__gte=0), name="stock_shipped_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.product_id}: {self.available} available, {self.reserved} reserved"


class StockMovement(models.Model):
    """Append-only ledger of stock entering or leaving the shop (not reservations).

    Stock conservation: for each SKU, sum(delta) == available + reserved + shipped.
    """

    Reason = StockMovementReason

    product = models.ForeignKey("shop.Product", on_delete=models.PROTECT, db_column="sku", related_name="+")
    delta = models.IntegerField()
    reason = models.CharField(max_length=20, choices=Reason.choices)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["product", "id"])]
        constraints = [
            models.CheckConstraint(condition=~models.Q(delta=0), name="stock_movement_delta_not_zero"),
            models.CheckConstraint(
                condition=models.Q(reason__in=StockMovementReason.values), name="stock_movement_reason_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.product_id} {self.delta:+d} ({self.reason})"


class Shipment(models.Model):
    """A warehouse request to pick and ship a paid order (the warehouse consumer),
    marked shipped by inventory.services.ship_order. The warehouse knows orders
    only through what the orders app tells it (its events, and that call when an
    order leaves): it keeps the id it was given, not a foreign key into the
    orders app above it."""

    Status = ShipmentStatus

    order_id = models.BigIntegerField(unique=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.REQUESTED)
    items = models.JSONField()
    shipping_address = models.JSONField(null=True, blank=True)  # as the order's OrderPaid event gave it
    requested_at = models.DateTimeField(auto_now_add=True)
    shipped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=ShipmentStatus.values), name="shipment_status_valid")
        ]

    def __str__(self) -> str:
        return f"shipment of order {self.order_id} ({self.status})"


class FlashSale(models.Model):
    """A SKU whose checkouts first pass the Redis gate (inventory/gate.py).
    PostgreSQL keeps the stock; Redis only turns away what cannot be served.

    In `direct` mode an admitted checkout writes its order at once, as any
    other; in `queue` mode it is handed to Kafka and written in batches by
    `write_queued_orders` (for a sale the database cannot take one order at a
    time: docs/operations.md)."""

    Mode = FlashSaleMode

    product = models.OneToOneField(
        "shop.Product", primary_key=True, on_delete=models.CASCADE, db_column="sku", related_name="flash_sale"
    )
    per_customer_limit = models.PositiveIntegerField(null=True, blank=True)
    mode = models.CharField(max_length=6, choices=Mode.choices, default=Mode.DIRECT)
    started_at = models.DateTimeField(auto_now_add=True)  # when it was seeded
    # The window checkouts are admitted in: the gate compares it with Redis's clock, so the
    # sale opens and closes on time with no process running at the edges. No end: open-ended.
    starts_at = models.DateTimeField(default=timezone.now)
    ends_at = models.DateTimeField(null=True, blank=True)
    # Minor units a unit costs inside the window (null: the catalog price). Priced as the
    # shop prices everything: an automatic promotion of the SKU with the sale's window.
    sale_price = models.BigIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    promotion = models.OneToOneField(
        "shop.Promotion", null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="flash_sale"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(per_customer_limit__isnull=True) | models.Q(per_customer_limit__gt=0),
                name="flash_sale_limit_positive",
            ),
            models.CheckConstraint(condition=models.Q(mode__in=FlashSaleMode.values), name="flash_sale_mode_valid"),
            models.CheckConstraint(
                condition=models.Q(ends_at__isnull=True) | models.Q(ends_at__gt=models.F("starts_at")),
                name="flash_sale_ends_after_start",
            ),
            models.CheckConstraint(
                condition=models.Q(sale_price__isnull=True) | models.Q(sale_price__gt=0),
                name="flash_sale_price_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"flash sale of {self.product_id}"


class LowStockAlert(models.Model):
    """One email to the stock managers about a SKU running low: at most one per
    SKU per day (the unique constraint decides between two consumers)."""

    product = models.ForeignKey("shop.Product", on_delete=models.CASCADE, db_column="sku", related_name="+")
    day = models.DateField()
    available = models.IntegerField()
    threshold = models.PositiveIntegerField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["product", "day"], name="low_stock_alert_once_a_day")]

    def __str__(self) -> str:
        return f"{self.product_id}: {self.available} left on {self.day}"
