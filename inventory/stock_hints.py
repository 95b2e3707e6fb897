"""Stock hints: each SKU's available units as last read, kept in process memory
for a few seconds (the catalog's stock read fills them, the cart shows them).
A hint, never a decision: checkout decides with a conditional UPDATE."""

import time
from collections.abc import Iterable

STOCK_HINT_MAX_AGE_SECONDS = 5.0
_hints: dict[str, tuple[int, float]] = {}  # sku -> (available, monotonic time read)


def remember_available(available_by_sku: dict[str, int]) -> None:
    now = time.monotonic()
    if len(_hints) > 100_000:
        _hints.clear()
    _hints.update({sku: (available, now) for sku, available in available_by_sku.items()})


def fresh_available_hints(*, skus: Iterable[str]) -> dict[str, int]:
    """Available units per SKU read at most a few seconds ago, from process
    memory: good enough to show "in stock" next to a cart line; checkout
    decides with a conditional UPDATE. SKUs without a fresh hint are left out."""
    now = time.monotonic()
    return {
        sku: hint[0]
        for sku in skus
        if (hint := _hints.get(sku)) is not None and now - hint[1] < STOCK_HINT_MAX_AGE_SECONDS
    }
