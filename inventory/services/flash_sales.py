from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from core.exceptions import NotFound
from core.hotcache import hot_cache
from inventory import gate
from inventory.models import FlashSale, Stock
from inventory.services.stock import set_available_stock
from shop.models import Product


def gated_skus() -> dict[str, int]:
    """Gated SKU -> per-customer limit (0: none), from process memory once warm
    (kept honest by the cache generation, like the rest of the hot cache)."""
    if hot_cache.flash_sales is None:
        hot_cache.ensure_generation()
        hot_cache.flash_sales = {
            sku: limit or 0 for sku, limit in FlashSale.objects.values_list("product_id", "per_customer_limit")
        }
    return hot_cache.flash_sales


@transaction.atomic
def seed_flash_sale(
    *,
    sku: str,
    stock: int,
    price: int | None = None,
    name: str | None = None,
    per_customer_limit: int | None = None,
    user: AbstractBaseUser | None = None,
) -> FlashSale:
    """Create or update the product, bring its available stock to exactly
    `stock` through the ledger, and open the gate with the same number."""
    product = Product.objects.filter(sku=sku).first()
    if product is None:
        if price is None:
            raise ValueError(f"{sku} is a new product: give it a price")
        product = Product.objects.create(sku=sku, name=name or sku, price=price)
    else:
        changes = {k: v for k, v in {"price": price, "name": name, "is_active": True}.items() if v is not None}
        Product.objects.filter(sku=sku).update(**changes)  # FlashSale's post_save moves the cache generation
    set_available_stock(sku=sku, available=stock, user=user, note="flash sale seed")
    sale, _ = FlashSale.objects.update_or_create(product=product, defaults={"per_customer_limit": per_customer_limit})
    transaction.on_commit(lambda: gate.set_counter(sku=sku, remaining=stock, reset_customers=True))
    return sale


def sync_flash_sale(*, sku: str) -> int:
    """Reset the gate's counter from the database (after a Redis restart or a
    lost release). Returns the new counter."""
    if not FlashSale.objects.filter(product_id=sku).exists():
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    available = Stock.objects.filter(product_id=sku).values_list("available", flat=True).first() or 0
    gate.set_counter(sku=sku, remaining=available, reset_customers=False)
    return available


@transaction.atomic
def end_flash_sale(*, sku: str) -> None:
    deleted, _ = FlashSale.objects.filter(product_id=sku).delete()
    if not deleted:
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    transaction.on_commit(lambda: gate.remove(sku=sku))
