from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from core.exceptions import NotFound
from core.hotcache import hot_cache
from inventory import gate
from inventory.models import FlashSale, Stock
from inventory.services.stock import set_available_stock
from shop.models import Product


def _sales() -> dict[str, tuple[int, str]]:
    """Gated SKU -> (per-customer limit, 0: none; mode), from process memory once
    warm (kept honest by the cache generation, like the rest of the hot cache)."""
    if hot_cache.flash_sales is None:
        hot_cache.ensure_generation()
        rows = FlashSale.objects.values_list("product_id", "per_customer_limit", "mode")
        hot_cache.flash_sales = {sku: (limit or 0, mode) for sku, limit, mode in rows}
    return hot_cache.flash_sales


def gated_skus() -> dict[str, int]:
    """Gated SKU -> per-customer limit (0: none)."""
    return {sku: limit for sku, (limit, _) in _sales().items()}


def gated_skus_in_memory() -> dict[str, int] | None:
    """gated_skus() when this process holds them, else None (and no query)."""
    sales = hot_cache.flash_sales
    return None if sales is None else {sku: limit for sku, (limit, _) in sales.items()}


def queued_skus() -> set[str]:
    """The gated SKUs whose admitted checkouts go through the queue."""
    return {sku for sku, (_, mode) in _sales().items() if mode == FlashSale.Mode.QUEUE}


@transaction.atomic
def set_flash_sale_mode(*, sku: str, mode: str) -> FlashSale:
    """Switch a running sale between direct and queue mode. Checkouts admitted
    before the switch finish the way they started; the queue's writer goes on
    draining what is already in Kafka."""
    if mode not in FlashSale.Mode.values:
        raise ValueError(f"mode must be one of {', '.join(FlashSale.Mode.values)}")
    sale = FlashSale.objects.filter(product_id=sku).first()
    if sale is None:
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    sale.mode = mode
    sale.save(update_fields=["mode"])  # post_save moves the cache generation: every process sees the switch
    return sale


@transaction.atomic
def seed_flash_sale(
    *,
    sku: str,
    stock: int,
    price: int | None = None,
    name: str | None = None,
    per_customer_limit: int | None = None,
    mode: str = FlashSale.Mode.DIRECT,
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
    if mode not in FlashSale.Mode.values:
        raise ValueError(f"mode must be one of {', '.join(FlashSale.Mode.values)}")
    sale, _ = FlashSale.objects.update_or_create(
        product=product, defaults={"per_customer_limit": per_customer_limit, "mode": mode}
    )
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
