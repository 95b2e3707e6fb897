"""Stock changes staff make by hand (the stock admin): each a ledger entry
through the stock services, never a figure read earlier written back."""

from collections.abc import Iterable

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from inventory.services.stock import receive_stock, set_available_stock, set_low_stock_threshold, write_off_stock

OPERATIONS = {"receive": "Receive stock (+N)", "write_off": "Write off (-N)", "set": "Set available to N"}
UNCHANGED = object()  # adjust_stock's threshold not given: the SKU keeps its own


@transaction.atomic
def adjust_stock(
    *,
    sku: str,
    operation: str | None,
    quantity: int | None = None,
    threshold: int | None | object = UNCHANGED,
    user: AbstractBaseUser | None = None,
    note: str = "",
) -> None:
    """One staff change of a SKU, all or nothing: an operation of OPERATIONS
    (None: no stock change) with `quantity`, then its low-stock threshold when
    given (None: back to the setting). An operation refused (a DomainError:
    below zero, past MAX_UNITS) changes nothing, the threshold included."""
    if operation == "receive":
        receive_stock(sku=sku, quantity=quantity, user=user, note=note)
    elif operation == "write_off":
        write_off_stock(sku=sku, quantity=quantity, user=user, note=note)
    elif operation == "set":
        set_available_stock(sku=sku, available=quantity, user=user, note=note)
    elif operation is not None:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}")
    if threshold is not UNCHANGED:
        set_low_stock_threshold(sku=sku, threshold=threshold)


@transaction.atomic
def receive_stock_bulk(
    *, skus: Iterable[str], quantity: int, user: AbstractBaseUser | None = None, note: str = ""
) -> int:
    """`quantity` more units for each SKU, all SKUs or none (StockLimitExceeded
    names the one that refused). Returns how many SKUs received."""
    # In SKU order: two staff receiving overlapping selections lock rows in the same order.
    skus = sorted(set(skus))
    for sku in skus:
        receive_stock(sku=sku, quantity=quantity, user=user, note=note)
    return len(skus)
