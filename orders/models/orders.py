"""The order aggregate: an order, its lines and the states it moves through."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.formatting import format_units
from shop.models import ADDRESS_FIELDS


class OrderStatus(models.TextChoices):
    PENDING_PAYMENT = "PENDING_PAYMENT", "Pending payment"
    PAID = "PAID", "Paid"
    SHIPPED = "SHIPPED", "Shipped"
    CANCELLED = "CANCELLED", "Cancelled"
    REFUNDED = "REFUNDED", "Refunded"
    # A queue-mode checkout the database could not take (the gate drifted, the
    # product went inactive): written so that the shopper sees why.
    REJECTED = "REJECTED", "Rejected"
    # Paid, not shipped, and the money held for it is gone: the card issuer's
    # authorization lapsed before a capture. Staff ask the shopper to pay again
    # (back to PENDING_PAYMENT) or cancel it (orders/services/authorizations.py).
    PAYMENT_LAPSED = "PAYMENT_LAPSED", "Payment lapsed"


class OrderQuerySet(models.QuerySet):
    def pending_expired(self, now):
        return self.filter(status=OrderStatus.PENDING_PAYMENT, expires_at__lte=now)


class Order(models.Model):
    # No index of its own: order_customer_newest and the key's unique index both lead with it,
    # and each index is written on every order (bench/queue.py part 1).
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders", db_index=False
    )
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
    shipped_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # Where it goes, as it was at checkout (editing the saved address later changes
    # no order). Null only on orders placed before addresses existed.
    shipping_address = models.JSONField(null=True, blank=True)
    # The client address checkout saw, and whether the order holds units in
    # UnpaidHold (direct checkouts do; queued ones are bounded by the sale's gate).
    hold_address = models.CharField(max_length=64, blank=True, default="", db_default="")
    holds_units = models.BooleanField(default=False, db_default=False)
    rejection_reason = models.CharField(max_length=40, blank=True, default="", db_default="")  # REJECTED: why
    # The promotions that took something off, as checkout priced the order:
    # [{"promotion_id", "name", "code" (a voucher's; null), "amount"}]; total_amount is after them.
    discounts = models.JSONField(default=list, db_default=[], blank=True)
    # What it costs beyond its goods, as checkout priced it (shop/totals.py; docs/architecture.md, "Totals"):
    # total_amount = the items' gross + shipping_amount, and tax_amount is in it.
    prices_include_tax = models.BooleanField(default=True, db_default=True)  # its items' prices, as the catalog's
    tax_country = models.CharField(max_length=2, blank=True, default="", db_default="")  # whose rates taxed it
    tax_amount = models.BigIntegerField(default=0, db_default=0)  # the items' tax + shipping's, as charged now
    shipping_amount = models.BigIntegerField(default=0, db_default=0)  # shipping's gross, after its discount
    # {"code", "name", "country", "price", "discount", "net", "tax", "gross", "taxes": [{"rate", "base", "amount"}]}
    shipping = models.JSONField(null=True, blank=True)

    objects = OrderQuerySet.as_manager()

    class Meta:
        db_table = "orders"
        ordering = ["-id"]
        permissions = [("export_order", "Can export orders as CSV")]
        constraints = [
            models.UniqueConstraint(fields=["customer", "idempotency_key"], name="order_idempotency_key_unique"),
            models.CheckConstraint(condition=Q(status__in=OrderStatus.values), name="order_status_valid"),
            models.CheckConstraint(condition=Q(total_amount__gte=0), name="order_total_not_negative"),
            models.CheckConstraint(condition=~Q(idempotency_key=""), name="order_idempotency_key_not_empty"),
            models.CheckConstraint(
                condition=Q(status=OrderStatus.REJECTED) | Q(rejection_reason=""),
                name="order_rejection_reason_only_rejected",
            ),
            models.CheckConstraint(
                condition=Q(shipping_address__isnull=True) | Q(shipping_address__has_keys=list(ADDRESS_FIELDS)),
                name="order_shipping_address_complete",
            ),
            models.CheckConstraint(
                condition=Q(tax_amount__gte=0, shipping_amount__gte=0)
                & Q(tax_amount__lte=F("total_amount"), shipping_amount__lte=F("total_amount")),
                name="order_tax_and_shipping_within_total",
            ),
            models.CheckConstraint(
                condition=Q(shipping_amount=0) | Q(shipping__isnull=False), name="order_shipping_charged_named"
            ),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=Q(status=OrderStatus.PENDING_PAYMENT),
                name="order_pending_expires_at",
            ),
            models.Index(fields=["customer", "-id"], name="order_customer_newest"),
            # Few and waiting for staff: the dashboard counts them on every view.
            models.Index(fields=["id"], condition=Q(status=OrderStatus.PAYMENT_LAPSED), name="order_payment_lapsed"),
        ]

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"


class OrderItem(models.Model):
    # Indexed by order_item_sku_unique (order, sku) and order_item_sku: without the indexes Django
    # adds to foreign keys, one on the order already covered and a LIKE index on the SKU no query
    # uses (the admin's search is case-insensitive), each written on every line.
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items", db_index=False)
    product = models.ForeignKey(
        "shop.Product", on_delete=models.PROTECT, db_column="sku", related_name="+", db_index=False
    )
    name = models.CharField(max_length=200)
    quantity = models.IntegerField()
    unit_price = models.BigIntegerField()  # the catalog price when the order was placed
    discount = models.BigIntegerField(default=0, db_default=0)  # minor units off the whole line (promotions)
    # The line's tax at tax_rate (basis points) and what it costs with it, as checkout priced it:
    # gross = quantity x unit_price - discount (+ tax when the prices exclude it: Order.prices_include_tax).
    tax_rate = models.IntegerField(default=0, db_default=0)
    tax = models.BigIntegerField(default=0, db_default=0)
    gross = models.BigIntegerField()
    # What became of the units since, each count grown by a conditional UPDATE under
    # these CHECKs (orders/services/returns.py, orders/services/amendments.py):
    cancelled = models.IntegerField(default=0, db_default=0)  # removed by staff before shipping
    in_returns = models.IntegerField(default=0, db_default=0)  # claimed by returns not rejected
    returned = models.IntegerField(default=0, db_default=0)  # of those, received back
    refunded = models.IntegerField(default=0, db_default=0)  # whose price went back to the shopper

    class Meta:
        db_table = "order_items"
        ordering = ["product_id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "product"], name="order_item_sku_unique"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="order_item_quantity_positive"),
            models.CheckConstraint(condition=Q(unit_price__gte=0), name="order_item_price_not_negative"),
            models.CheckConstraint(
                condition=Q(discount__gte=0) & Q(discount__lte=F("quantity") * F("unit_price")),
                name="order_item_discount_within_line",
            ),
            models.CheckConstraint(
                condition=Q(tax_rate__gte=0, tax_rate__lte=10_000, tax__gte=0, tax__lte=F("gross"))
                & (
                    Q(gross=F("quantity") * F("unit_price") - F("discount"))
                    | Q(gross=F("quantity") * F("unit_price") - F("discount") + F("tax"))
                ),
                name="order_item_gross_adds_up",
            ),
            models.CheckConstraint(
                condition=Q(cancelled__gte=0)
                & Q(in_returns__gte=0)
                & Q(in_returns__lte=F("quantity") - F("cancelled")),
                name="order_item_returns_within_shipped",
            ),
            models.CheckConstraint(
                condition=Q(returned__gte=0) & Q(returned__lte=F("in_returns")),
                name="order_item_returned_within_returns",
            ),
            models.CheckConstraint(
                condition=Q(refunded__gte=0) & Q(refunded__lte=F("quantity") - F("cancelled")),
                name="order_item_refunded_within_line",
            ),
        ]
        indexes = [models.Index(fields=["product"], name="order_item_sku")]  # a product's lines (PROTECT)

    def __str__(self) -> str:
        return format_units(self.quantity, self.product_id)

    @property
    def line_total(self) -> int:
        """What the line costs after its discount, in the catalog's terms (`gross` is what it is charged)."""
        return self.quantity * self.unit_price - self.discount

    @property
    def net(self) -> int:
        return self.gross - self.tax

    @property
    def shipped_units(self) -> int:
        return self.quantity - self.cancelled

    def price_of_units(self, *, first: int, count: int) -> int:
        """What units [first, first + count) of the line were charged (gross), in
        minor units. The first m units' share is rounded up (the gross is spread
        over the units with integer division; so is the discount, rounded down,
        which is the same): a part of the line gives back at most a minor unit
        more than its exact share, and the units that complete the line make up
        for it, so every unit of the line together costs exactly `gross`."""
        return _share(self.gross, first + count, self.quantity) - _share(self.gross, first, self.quantity)

    def tax_of_units(self, *, first: int, count: int) -> int:
        """The tax in price_of_units: that price less the net's share (shared out
        the same way), so it is never more than the price nor below 0, and all
        the units give back exactly `tax`."""
        net = self.gross - self.tax
        net_share = _share(net, first + count, self.quantity) - _share(net, first, self.quantity)
        return self.price_of_units(first=first, count=count) - net_share


def _share(amount: int, units: int, of: int) -> int:
    """`units` of `of` units' share of `amount`, rounded up."""
    return -(-amount * units // of)
