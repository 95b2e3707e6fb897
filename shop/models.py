from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

SKU_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
sku_validator = RegexValidator(SKU_PATTERN, "A SKU is 1-64 characters of A-Z a-z 0-9 . _ -")


class Product(models.Model):
    sku = models.CharField(primary_key=True, max_length=64, validators=[sku_validator])
    name = models.CharField(max_length=200)
    # Minor units of settings.SHOP_CURRENCY; checkout snapshots it per order item.
    price = models.BigIntegerField(validators=[MinValueValidator(1)])
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["sku"]
        constraints = [
            models.CheckConstraint(condition=models.Q(price__gt=0), name="product_price_positive"),
            models.CheckConstraint(condition=models.Q(sku__regex=SKU_PATTERN), name="product_sku_format"),
        ]

    def __str__(self) -> str:
        return f"{self.sku} {self.name}"
