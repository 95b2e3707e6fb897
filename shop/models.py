from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

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


class LoyaltyEntry(models.Model):
    """The shopper's points ledger (the loyalty consumer): earned on payment,
    reversed on refund. A shopper's balance is the sum of `points`."""

    class Reason(models.TextChoices):
        ORDER_PAID = "order_paid", "Order paid"
        ORDER_REFUNDED = "order_refunded", "Order refunded"

    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="loyalty_entries")
    order_id = models.BigIntegerField()
    points = models.IntegerField()
    reason = models.CharField(max_length=20, choices=Reason.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "loyalty entries"
        constraints = [
            models.UniqueConstraint(fields=["order_id", "reason"], name="loyalty_once_per_order_and_reason"),
            models.CheckConstraint(
                condition=models.Q(reason__in=["order_paid", "order_refunded"]), name="loyalty_reason_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.points:+d} points for order {self.order_id}"
