from collections.abc import Iterable

from core.hotcache import CachedProduct, hot_cache
from shop.models import Product


def cached_products(*, skus: Iterable[str]) -> dict[str, CachedProduct | None]:
    """Products by SKU from process memory; misses cost one query for all of them.
    A SKU that does not exist maps to None (and is cached as such)."""
    skus = list(skus)
    result = {sku: hot_cache.products.get(sku) for sku in skus if sku in hot_cache.products}
    missing = [sku for sku in skus if sku not in result]
    if missing:
        hot_cache.ensure_generation()
        found = {
            sku: CachedProduct(sku=sku, name=name, price=price, is_active=is_active)
            for sku, name, price, is_active in Product.objects.filter(sku__in=missing).values_list(
                "sku", "name", "price", "is_active"
            )
        }
        for sku in missing:
            result[sku] = found.get(sku)
            hot_cache.remember(hot_cache.products, sku, result[sku])
    return result
