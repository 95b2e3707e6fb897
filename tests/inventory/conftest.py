"""What the inventory tests share: a flash sale opened as staff open one, and its gate counter."""

from inventory import gate


def seed(sku: str = "HOT", stock: int = 5, limit: int | None = None) -> None:
    """seed_flash_sale sets the gate counter after commit: run the callbacks."""
    from django.test import TestCase

    from inventory.services.flash_sales import seed_flash_sale

    with TestCase.captureOnCommitCallbacks(execute=True):
        seed_flash_sale(sku=sku, stock=stock, price=999, name="Console", per_customer_limit=limit)


def counter(sku: str = "HOT") -> int:
    """Units the gate still admits for the SKU."""
    return int(gate.connection().get(gate.remaining_key(sku)))
