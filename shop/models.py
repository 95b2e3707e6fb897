from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

SKU_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
sku_validator = RegexValidator(SKU_PATTERN, "A SKU is 1-64 characters of A-Z a-z 0-9 . _ -")
# Ten billion in major units: even a full cart (100 lines of 99 units) at this
# price keeps an order's total inside a bigint, so no total can overflow.
MAX_PRICE = 10**12
PHONE_PATTERN = r"^\+?[0-9][0-9 ()./-]{3,18}[0-9]$"
PHONE_MESSAGE = "A phone number: digits, optionally a leading +, spaces ( ) . / - between them"
ADDRESS_FIELDS = ("name", "line1", "line2", "city", "postal_code", "country", "phone")


class Product(models.Model):
    sku = models.CharField(primary_key=True, max_length=64, validators=[sku_validator])
    name = models.CharField(max_length=200)
    # Minor units of settings.SHOP_CURRENCY; checkout snapshots it per order item.
    price = models.BigIntegerField(validators=[MinValueValidator(1), MaxValueValidator(MAX_PRICE)])
    is_active = models.BooleanField(default=True)
    description = models.TextField(blank=True, default="", db_default="", max_length=5000)
    image_url = models.URLField(blank=True, default="", db_default="", max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["sku"]
        constraints = [
            models.CheckConstraint(condition=models.Q(price__gt=0), name="product_price_positive"),
            models.CheckConstraint(condition=models.Q(price__lte=MAX_PRICE), name="product_price_at_most_max"),
            models.CheckConstraint(condition=models.Q(sku__regex=SKU_PATTERN), name="product_sku_format"),
        ]

    def __str__(self) -> str:
        return f"{self.sku} {self.name}"


class Address(models.Model):
    """A shopper's default shipping address. Checkout copies it onto the order
    (orders keep their own snapshot: editing this later changes no order)."""

    customer = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="address"
    )
    name = models.CharField(max_length=100)
    line1 = models.CharField(max_length=200)
    line2 = models.CharField(max_length=200, blank=True, default="")
    city = models.CharField(max_length=100)
    postal_code = models.CharField(max_length=20)
    country = models.CharField(max_length=2)  # ISO 3166-1 alpha-2 (the API checks the code exists)
    phone = models.CharField(max_length=20, validators=[RegexValidator(PHONE_PATTERN, PHONE_MESSAGE)])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(country__regex=r"^[A-Z]{2}$"), name="address_country_iso"),
            models.CheckConstraint(condition=models.Q(phone__regex=PHONE_PATTERN), name="address_phone_format"),
            *[
                models.CheckConstraint(condition=~models.Q(**{name: ""}), name=f"address_{name}_not_empty")
                for name in ("name", "line1", "city", "postal_code")
            ],
        ]

    def __str__(self) -> str:
        return f"{self.name}, {self.city} ({self.country})"


class LoyaltyReason(models.TextChoices):
    ORDER_PAID = "order_paid", "Order paid"
    ORDER_REFUNDED = "order_refunded", "Refund completed"
    ORDER_CANCELLED = "order_cancelled", "Paid order cancelled (payment voided)"
    LINES_REMOVED = "lines_removed", "Lines removed before the capture"


class LoyaltyEntry(models.Model):
    """The shopper's points ledger (the loyalty consumer): earned on payment,
    taken back as refunds complete (in proportion) or when a paid order is
    cancelled (all that is left). A shopper's balance is
    the sum of `points`."""

    Reason = LoyaltyReason

    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="loyalty_entries")
    order_id = models.BigIntegerField()
    points = models.IntegerField()
    reason = models.CharField(max_length=20, choices=Reason.choices)
    # What the entry answers when an order may have several of its reason: "refund-{id}"
    # for a refund, "lines-{event id}" for removed lines; "" for the once-per-order ones.
    source = models.CharField(max_length=60, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "loyalty entries"
        constraints = [
            models.UniqueConstraint(fields=["order_id", "reason", "source"], name="loyalty_once_per_source"),
            models.CheckConstraint(condition=models.Q(reason__in=LoyaltyReason.values), name="loyalty_reason_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.points:+d} points for order {self.order_id}"


# --- Promotions and vouchers (shop/pricing.py prices with them; shop/promotions.py counts vouchers) ------------------

VOUCHER_CODE_PATTERN = r"^[A-Z0-9-]{1,32}$"
voucher_code_validator = RegexValidator(
    VOUCHER_CODE_PATTERN, "A voucher code is 1-32 letters, digits or dashes (stored upper-cased)"
)


class DiscountKind(models.TextChoices):
    PERCENT = "percent", "Percent off each unit"
    AMOUNT = "amount", "Amount off each unit"
    CART_AMOUNT = "cart_amount", "Amount off the cart"
    SALE_PRICE = "sale_price", "Sale price of each unit"  # a flash sale's price (inventory writes these)


class PromotionScope(models.TextChoices):
    SKUS = "skus", "The listed SKUs"
    CART = "cart", "The whole cart"


class Promotion(models.Model):
    """A discount with a window. Automatic when `code` is null; else a voucher the
    shopper enters, counted in `uses` (by conditional update, shop/promotions.py)
    within `usage_limit`, and per shopper in VoucherCustomerUse.

    `min_subtotal` is compared with the cart's subtotal at catalog prices. How
    promotions combine and round: shop/pricing.py."""

    Kind = DiscountKind
    Scope = PromotionScope

    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=DiscountKind.choices)
    # percent: 1-100; amount, cart_amount, sale_price: minor units, 1 to MAX_PRICE
    value = models.BigIntegerField(validators=[MinValueValidator(1), MaxValueValidator(MAX_PRICE)])
    # Explicit rather than "no SKUs listed": a SKU promotion whose SKUs were
    # forgotten must apply to nothing, not to the whole cart.
    scope = models.CharField(max_length=10, choices=PromotionScope.choices, default=PromotionScope.SKUS)
    products = models.ManyToManyField(Product, blank=True, related_name="promotions")
    min_subtotal = models.BigIntegerField(
        default=0, db_default=0, validators=[MinValueValidator(0), MaxValueValidator(MAX_PRICE)]
    )
    starts_at = models.DateTimeField(default=timezone.now)
    ends_at = models.DateTimeField(null=True, blank=True)  # null: open-ended
    # null: automatic. Unique by a constraint, not unique=True: no LIKE index (the admin's search cannot use one).
    code = models.CharField(max_length=32, null=True, blank=True, validators=[voucher_code_validator])
    usage_limit = models.IntegerField(null=True, blank=True, validators=[MinValueValidator(1)])  # null: none
    # Written only by redeem_voucher, VoucherBatch and give_back_vouchers (conditional updates), never by a form.
    uses = models.IntegerField(default=0, db_default=0)
    per_customer_limit = models.IntegerField(null=True, blank=True, validators=[MinValueValidator(1)])  # null: none
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["code"], name="promotion_code_unique"),
            models.CheckConstraint(condition=models.Q(kind__in=DiscountKind.values), name="promotion_kind_valid"),
            models.CheckConstraint(condition=models.Q(scope__in=PromotionScope.values), name="promotion_scope_valid"),
            models.CheckConstraint(
                condition=models.Q(value__gte=1)
                & (~models.Q(kind=DiscountKind.PERCENT) | models.Q(value__lte=100))
                & (models.Q(kind=DiscountKind.PERCENT) | models.Q(value__lte=MAX_PRICE)),
                name="promotion_value_in_range",
                violation_error_message=f"A percentage is 1 to 100; an amount is 1 to {MAX_PRICE} minor units.",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind=DiscountKind.CART_AMOUNT) | models.Q(scope=PromotionScope.CART),
                name="promotion_cart_amount_is_cart_wide",
                violation_error_message="An amount off the cart applies to the whole cart.",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind=DiscountKind.SALE_PRICE) | models.Q(scope=PromotionScope.SKUS),
                name="promotion_sale_price_is_per_sku",
                violation_error_message="A sale price applies to the listed SKUs.",
            ),
            models.CheckConstraint(
                condition=models.Q(min_subtotal__gte=0, min_subtotal__lte=MAX_PRICE),
                name="promotion_min_subtotal_in_range",
            ),
            models.CheckConstraint(
                condition=models.Q(ends_at__isnull=True) | models.Q(ends_at__gt=models.F("starts_at")),
                name="promotion_ends_after_start",
                violation_error_message="A promotion ends after it starts.",
            ),
            models.CheckConstraint(
                condition=models.Q(code__isnull=True) | models.Q(code__regex=VOUCHER_CODE_PATTERN),
                name="promotion_code_format",
                violation_error_message="A voucher code is 1-32 of A-Z 0-9 and -, upper-cased.",
            ),
            models.CheckConstraint(
                condition=models.Q(usage_limit__isnull=True) | models.Q(usage_limit__gt=0),
                name="promotion_usage_limit_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(per_customer_limit__isnull=True) | models.Q(per_customer_limit__gt=0),
                name="promotion_per_customer_limit_positive",
            ),
            models.CheckConstraint(condition=models.Q(uses__gte=0), name="promotion_uses_not_negative"),
            # The rule concurrent checkouts rely on: redeem_voucher's conditional
            # UPDATE stops at the limit, and this stops anything else.
            models.CheckConstraint(
                condition=models.Q(usage_limit__isnull=True) | models.Q(uses__lte=models.F("usage_limit")),
                name="promotion_uses_within_limit",
                violation_error_message="The usage limit cannot be below the uses so far.",
            ),
            # Only a voucher is counted: an automatic promotion has no limits and no uses.
            models.CheckConstraint(
                condition=models.Q(code__isnull=False)
                | models.Q(usage_limit__isnull=True, per_customer_limit__isnull=True, uses=0),
                name="promotion_limits_only_for_vouchers",
                violation_error_message="Only a voucher (a promotion with a code) has usage limits and uses.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.code})" if self.code else self.name

    @property
    def discount_label(self) -> str:
        if self.kind == DiscountKind.PERCENT:
            return f"{self.value}% off each unit"
        if self.kind == DiscountKind.SALE_PRICE:
            return f"each unit at {self.value}"
        return f"{self.value} off {'each unit' if self.kind == DiscountKind.AMOUNT else 'the cart'}"

    @property
    def remaining_uses(self) -> int | None:
        return None if self.usage_limit is None else self.usage_limit - self.uses

    def is_active_at(self, moment) -> bool:
        return self.starts_at <= moment and (self.ends_at is None or moment < self.ends_at)


class VoucherRedemption(models.Model):
    """One order's use of a voucher, written in the order's transaction and
    deleted when the order gives it back (cancelled, expired). At most one
    voucher per order, the stacking rule (shop/pricing.py): `order_id` is unique."""

    # No index of its own: voucher_redemption_newest leads with it.
    voucher = models.ForeignKey(Promotion, on_delete=models.PROTECT, related_name="redemptions", db_index=False)
    order_id = models.BigIntegerField()  # a plain integer: orders sit above shop
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # Whether the shopper's VoucherCustomerUse counted it (the voucher had a per-customer
    # limit then): giving it back takes back only what was taken.
    customer_counted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["order_id"], name="voucher_redemption_one_per_order"),
        ]
        indexes = [models.Index(fields=["voucher", "-id"], name="voucher_redemption_newest")]

    def __str__(self) -> str:
        return f"voucher {self.voucher_id} on order {self.order_id}"


class VoucherCustomerUse(models.Model):
    """How many orders of one shopper use a voucher now. `cap` is the voucher's
    per-customer limit in force when `uses` last grew (as UnpaidHold's cap):
    `uses` grows only by a conditional update, and the CHECK backs it."""

    # No index of its own: voucher_customer_use_unique leads with it.
    voucher = models.ForeignKey(Promotion, on_delete=models.CASCADE, related_name="customer_uses", db_index=False)
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    uses = models.IntegerField(default=0)
    cap = models.IntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["voucher", "customer"], name="voucher_customer_use_unique"),
            models.CheckConstraint(condition=models.Q(uses__gte=0), name="voucher_customer_uses_not_negative"),
            models.CheckConstraint(condition=models.Q(cap__gt=0), name="voucher_customer_cap_positive"),
            models.CheckConstraint(
                condition=models.Q(uses__lte=models.F("cap")), name="voucher_customer_uses_within_cap"
            ),
        ]

    def __str__(self) -> str:
        return f"voucher {self.voucher_id}: customer {self.customer_id} used it {self.uses} of {self.cap}"
