import time
from collections.abc import Iterable

from inventory.models import Stock

STOCK_HINT_MAX_AGE_SECONDS = 5.0
_hints: dict[str, tuple[int, float]] = {}  # sku -> (available, monotonic time read)


def remember_available(available_by_sku: dict[str, int]) -> None:
    now = time.monotonic()
    if len(_hints) > 100_000:
        _hints.clear()
    _hints.update({sku: (available, now) for sku, available in available_by_sku.items()})


def available_hints(*, skus: Iterable[str]) -> dict[str, int]:
    """Available units per SKU, at most a few seconds old: good enough to show
    "in stock" next to a cart line; checkout decides with a conditional UPDATE."""
    now = time.monotonic()
    skus = list(skus)
    fresh = {
        sku: hint[0]
        for sku in skus
        if (hint := _hints.get(sku)) is not None and now - hint[1] < STOCK_HINT_MAX_AGE_SECONDS
    }
    missing = [sku for sku in skus if sku not in fresh]
    if missing:
        read = dict(Stock.objects.filter(product_id__in=missing).values_list("product_id", "available"))
        read = {sku: read.get(sku, 0) for sku in missing}
        remember_available(read)
        fresh.update(read)
    return fresh
