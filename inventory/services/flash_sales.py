from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Sum

from config.exceptions import NotFound
from config.hotcache import hot_cache
from inventory import gate
from inventory.models import FlashSale, Stock
from inventory.services.stock import set_available_stock
from orders.models import OrderItem, OrderStatus
from shop.models import Product


@dataclass(frozen=True)
class FlashSaleStatus:
    sku: str
    per_customer_limit: int | None
    gate_remaining: int | None
    available: int
    reserved: int
    units_ordered: int
    refused: int


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


def flash_sale_status(*, sku: str | None = None) -> list[FlashSaleStatus]:
    sales = FlashSale.objects.order_by("product_id")
    if sku:
        sales = sales.filter(product_id=sku)
    sales = list(sales)
    counters = gate.counters(skus=[s.product_id for s in sales])
    result = []
    for sale in sales:
        stock = Stock.objects.filter(product_id=sale.product_id).first()
        ordered = (
            OrderItem.objects.filter(product_id=sale.product_id, order__created_at__gte=sale.started_at)
            .exclude(order__status=OrderStatus.CANCELLED)
            .aggregate(total=Sum("quantity"))["total"]
        )
        result.append(
            FlashSaleStatus(
                sku=sale.product_id,
                per_customer_limit=sale.per_customer_limit,
                gate_remaining=counters[sale.product_id]["remaining"],
                available=stock.available if stock else 0,
                reserved=stock.reserved if stock else 0,
                units_ordered=ordered or 0,
                refused=counters[sale.product_id]["refused"],
            )
        )
    return result
