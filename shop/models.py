from django.conf import settings
from django.contrib.postgres.fields import ArrayField
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
COUNTRY_PATTERN = r"^[A-Z]{2}$"  # ISO 3166-1 alpha-2
TAX_CLASS_PATTERN = r"^[a-z0-9_-]{1,20}$"
SHIPPING_CODE_PATTERN = r"^[a-z0-9-]{1,32}$"
MAX_WEIGHT_GRAMS = 10**7  # ten tonnes: a band or a product above it is a typing error
STANDARD_TAX_CLASS = "standard"


class Product(models.Model):
    sku = models.CharField(primary_key=True, max_length=64, validators=[sku_validator])
    name = models.CharField(max_length=200)
    # Minor units of settings.SHOP_CURRENCY; checkout snapshots it per order item.
    price = models.BigIntegerField(validators=[MinValueValidator(1), MaxValueValidator(MAX_PRICE)])
    is_active = models.BooleanField(default=True)
    description = models.TextField(blank=True, default="", db_default="", max_length=5000)
    image_url = models.URLField(blank=True, default="", db_default="", max_length=500)
    # 0: goods that do not ship (a cart of them needs no shipping method)
    weight_grams = models.IntegerField(
        default=0, db_default=0, validators=[MinValueValidator(0), MaxValueValidator(MAX_WEIGHT_GRAMS)]
    )
    tax_class = models.ForeignKey(
        "TaxClass",
        on_delete=models.PROTECT,
        default=STANDARD_TAX_CLASS,
        db_default=STANDARD_TAX_CLASS,
        related_name="+",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["sku"]
        constraints = [
            models.CheckConstraint(condition=models.Q(price__gt=0), name="product_price_positive"),
            models.CheckConstraint(condition=models.Q(price__lte=MAX_PRICE), name="product_price_at_most_max"),
            models.CheckConstraint(condition=models.Q(sku__regex=SKU_PATTERN), name="product_sku_format"),
            models.CheckConstraint(
                condition=models.Q(weight_grams__gte=0, weight_grams__lte=MAX_WEIGHT_GRAMS),
                name="product_weight_in_range",
            ),
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


class Account(models.Model):
    """What the shop knows of a shopper's account beyond Django's user: whether
    their e-mail address is verified (and which one: a changed address is kept
    pending until its own link is followed), and whether the account was erased
    (docs/architecture.md, "Accounts"). A user without a row has verified nothing."""

    customer = models.OneToOneField(
        settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="account"
    )
    # The address whose link was followed, and when: verified while it is still the user's e-mail.
    verified_email = models.EmailField(blank=True, default="")
    email_verified_at = models.DateTimeField(null=True, blank=True)
    # A new address asked for (PUT /api/auth/me/email): it replaces the e-mail once verified.
    pending_email = models.EmailField(blank=True, default="")
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(verified_email="", email_verified_at__isnull=True)
                | (~models.Q(verified_email="") & models.Q(email_verified_at__isnull=False)),
                name="account_verified_email_has_its_moment",
            ),
        ]

    def __str__(self) -> str:
        return f"account of {self.customer_id}"


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
    FREE_SHIPPING = "free_shipping", "Percent off the shipping (100: free shipping)"


PERCENT_KINDS = (DiscountKind.PERCENT, DiscountKind.FREE_SHIPPING)


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
                & (~models.Q(kind__in=PERCENT_KINDS) | models.Q(value__lte=100))
                & (models.Q(kind__in=PERCENT_KINDS) | models.Q(value__lte=MAX_PRICE)),
                name="promotion_value_in_range",
                violation_error_message=f"A percentage is 1 to 100; an amount is 1 to {MAX_PRICE} minor units.",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind=DiscountKind.CART_AMOUNT) | models.Q(scope=PromotionScope.CART),
                name="promotion_cart_amount_is_cart_wide",
                violation_error_message="An amount off the cart applies to the whole cart.",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind=DiscountKind.FREE_SHIPPING) | models.Q(scope=PromotionScope.CART),
                name="promotion_free_shipping_is_cart_wide",
                violation_error_message="A shipping discount applies to the whole cart.",
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
        if self.kind == DiscountKind.FREE_SHIPPING:
            return "free shipping" if self.value == 100 else f"{self.value}% off the shipping"
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


# --- Tax and shipping (shop/totals.py prices with them) -------------------------------------------------------------


class TaxClass(models.Model):
    """A kind of goods for tax: `standard`, `reduced`, `zero`, … (the rates are per country)."""

    code = models.CharField(
        primary_key=True, max_length=20, validators=[RegexValidator(TAX_CLASS_PATTERN, "1-20 of a-z 0-9 _ -")]
    )
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["code"]
        verbose_name_plural = "tax classes"
        constraints = [models.CheckConstraint(condition=models.Q(code__regex=TAX_CLASS_PATTERN), name="tax_class_code")]

    def __str__(self) -> str:
        return self.name


class TaxRate(models.Model):
    """The rate of one tax class in one country from `valid_from` on (until the
    next one's), in basis points: 2000 is 20%. No rate for a country and class:
    nothing is charged (docs/architecture.md, "Totals")."""

    country = models.CharField(max_length=2)
    tax_class = models.ForeignKey(TaxClass, on_delete=models.PROTECT, related_name="rates", db_index=False)
    rate = models.IntegerField(
        validators=[MinValueValidator(0), MaxValueValidator(10_000)], help_text="Basis points: 2000 is 20%"
    )
    valid_from = models.DateField()
    source = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        ordering = ["country", "tax_class", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["tax_class", "country", "valid_from"], name="tax_rate_one_per_day"),
            models.CheckConstraint(condition=models.Q(country__regex=COUNTRY_PATTERN), name="tax_rate_country_iso"),
            models.CheckConstraint(
                condition=models.Q(rate__gte=0, rate__lte=10_000),
                name="tax_rate_in_range",
                violation_error_message="A rate is 0 to 10000 basis points (0% to 100%).",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.country} {self.tax_class_id} {self.rate / 100:g}% from {self.valid_from}"


class ShippingZone(models.Model):
    """Countries shipped to alike (a method ships to the countries of its zone)."""

    name = models.CharField(max_length=100, unique=True)
    countries = ArrayField(models.CharField(max_length=2), help_text="ISO 3166-1 alpha-2 codes, e.g. GB, IE")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(countries=[]), name="shipping_zone_has_countries"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(self.countries)})"


class ShippingPricing(models.TextChoices):
    FLAT = "flat", "Flat price"
    WEIGHT = "weight", "By the cart's weight, in bands"


class ShippingMethod(models.Model):
    """A way to deliver: its price in the catalog's terms (tax included when
    PRICES_INCLUDE_TAX), flat or by weight band; free from `free_over` (the goods'
    total after discounts) when set."""

    Pricing = ShippingPricing

    code = models.CharField(
        max_length=32, unique=True, validators=[RegexValidator(SHIPPING_CODE_PATTERN, "1-32 of a-z 0-9 -")]
    )
    name = models.CharField(max_length=100)
    zone = models.ForeignKey(ShippingZone, on_delete=models.PROTECT, related_name="methods")
    pricing = models.CharField(max_length=10, choices=ShippingPricing.choices, default=ShippingPricing.FLAT)
    price = models.BigIntegerField(
        default=0, validators=[MinValueValidator(0), MaxValueValidator(MAX_PRICE)], help_text="Flat: minor units"
    )
    free_over = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(MAX_PRICE)],
        help_text="Free when the goods (after discounts) cost at least this; empty: never free",
    )
    min_days = models.PositiveSmallIntegerField(default=1)
    max_days = models.PositiveSmallIntegerField(default=3)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["code"]
        constraints = [
            models.CheckConstraint(condition=models.Q(code__regex=SHIPPING_CODE_PATTERN), name="shipping_method_code"),
            models.CheckConstraint(
                condition=models.Q(pricing__in=ShippingPricing.values), name="shipping_pricing_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(price__gte=0, price__lte=MAX_PRICE), name="shipping_price_in_range"
            ),
            models.CheckConstraint(
                condition=models.Q(free_over__isnull=True) | models.Q(free_over__gte=0, free_over__lte=MAX_PRICE),
                name="shipping_free_over_in_range",
            ),
            models.CheckConstraint(
                condition=models.Q(max_days__gte=models.F("min_days")),
                name="shipping_days_ordered",
                violation_error_message="The longest estimate is at least the shortest.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.code})"


class ShippingRateBand(models.Model):
    """A weight-priced method's price for carts up to `up_to_grams` (the
    lightest band that holds the cart's weight prices it; heavier than every
    band: the method cannot carry the cart)."""

    method = models.ForeignKey(ShippingMethod, on_delete=models.CASCADE, related_name="bands", db_index=False)
    up_to_grams = models.IntegerField(validators=[MinValueValidator(1), MaxValueValidator(MAX_WEIGHT_GRAMS)])
    price = models.BigIntegerField(validators=[MinValueValidator(0), MaxValueValidator(MAX_PRICE)])

    class Meta:
        ordering = ["method", "up_to_grams"]
        constraints = [
            models.UniqueConstraint(fields=["method", "up_to_grams"], name="shipping_band_unique"),
            models.CheckConstraint(
                condition=models.Q(up_to_grams__gte=1, up_to_grams__lte=MAX_WEIGHT_GRAMS),
                name="shipping_band_weight_in_range",
            ),
            models.CheckConstraint(
                condition=models.Q(price__gte=0, price__lte=MAX_PRICE), name="shipping_band_price_in_range"
            ),
        ]

    def __str__(self) -> str:
        return f"up to {self.up_to_grams} g: {self.price}"
