from collections.abc import Iterable
from contextlib import nullcontext

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from inventory.exceptions import OutOfStock, StockLimitExceeded, WriteOffBelowZero
from inventory.models import MAX_UNITS, Stock, StockMovement


@transaction.atomic
def receive_stock(*, sku: str, quantity: int, user: AbstractBaseUser | None = None, note: str = "") -> StockMovement:
    """Units arrive: available += quantity, with a ledger entry; refused past MAX_UNITS."""
    if quantity <= 0:
        raise ValueError("quantity must be positive")
    Stock.objects.get_or_create(product_id=sku)
    if quantity > MAX_UNITS or not _with_room_for(sku, quantity).update(available=F("available") + quantity):
        raise StockLimitExceeded(sku=sku, requested=quantity)
    return StockMovement.objects.create(
        product_id=sku, delta=quantity, reason=StockMovement.Reason.RECEIVED, created_by=user, note=note
    )


def _with_room_for(sku: str, quantity: int):
    """The SKU's row if `quantity` more units fit: reservations move units between
    available and reserved, so their sum is what must stay an integer."""
    return Stock.objects.alias(held=F("available") + F("reserved")).filter(
        product_id=sku, held__lte=MAX_UNITS - quantity
    )


@transaction.atomic
def write_off_stock(*, sku: str, quantity: int, user: AbstractBaseUser | None = None, note: str = "") -> StockMovement:
    """Units leave without a sale (damaged, lost): refused below zero available."""
    if quantity <= 0:
        raise ValueError("quantity must be positive")
    updated = Stock.objects.filter(product_id=sku, available__gte=quantity).update(available=F("available") - quantity)
    if not updated:
        raise WriteOffBelowZero(sku=sku, requested=quantity)
    return StockMovement.objects.create(
        product_id=sku, delta=-quantity, reason=StockMovement.Reason.WRITTEN_OFF, created_by=user, note=note
    )


@transaction.atomic
def set_available_stock(
    *, sku: str, available: int, user: AbstractBaseUser | None = None, note: str = ""
) -> StockMovement | None:
    """Bring `available` to an exact figure, as a delta computed under the row lock
    so that reservations made meanwhile are never overwritten."""
    if available < 0:
        raise ValueError("available cannot be negative")
    Stock.objects.get_or_create(product_id=sku)
    current = Stock.objects.select_for_update().values_list("available", flat=True).get(product_id=sku)
    delta = available - current
    if delta == 0:
        return None
    if delta > 0 and not _with_room_for(sku, delta).exists():
        raise StockLimitExceeded(sku=sku, requested=delta)
    Stock.objects.filter(product_id=sku).update(available=F("available") + delta)
    reason = StockMovement.Reason.RECEIVED if delta > 0 else StockMovement.Reason.WRITTEN_OFF
    return StockMovement.objects.create(
        product_id=sku, delta=delta, reason=reason, created_by=user, note=note or f"set to {available}"
    )


def stock_audit(*, skus: Iterable[str] | None = None) -> list[dict]:
    """For each SKU: the ledger's net (received - written off) against
    available + reserved + shipped. `difference` is 0 when stock is conserved."""
    ledger = (
        StockMovement.objects.filter(product_id=OuterRef("product_id"))
        .values("product_id")
        .annotate(net=Sum("delta"))
        .values("net")
    )
    rows = Stock.objects.annotate(ledger_net=Coalesce(Subquery(ledger), 0)).order_by("product_id")
    if skus is not None:
        rows = rows.filter(product_id__in=list(skus))
    return [
        {
            "sku": row.product_id,
            "ledger_net": row.ledger_net,
            "on_hand": row.available + row.reserved + row.shipped,
            "available": row.available,
            "reserved": row.reserved,
            "shipped": row.shipped,
            "difference": row.ledger_net - (row.available + row.reserved + row.shipped),
        }
        for row in rows
    ]


# Raw SQL on the checkout path: building this UPDATE through the ORM cost more
# CPU than running it (bench/checkout.py), and checkout is the hot path.
_RESERVE = (
    "UPDATE inventory SET available = available - %s, reserved = reserved + %s WHERE sku = %s AND available >= %s"
)


def reserve_stock(*, lines: dict[str, int], cursor: CursorWrapper | None = None) -> None:
    """Move units from available to reserved, all lines or none (the caller's
    transaction rolls back on OutOfStock). One conditional UPDATE per SKU:
    `available >= quantity` is checked by the row update itself, so two
    checkouts can never both take the last unit."""
    with nullcontext(cursor) if cursor else connection.cursor() as cursor:
        # Reserve in SKU order so that concurrent orders take row locks in the
        # same order and cannot deadlock.
        for sku in sorted(lines):
            quantity = lines[sku]
            cursor.execute(_RESERVE, [quantity, quantity, sku, quantity])
            if cursor.rowcount == 0:
                available = Stock.objects.filter(product_id=sku).values_list("available", flat=True).first()
                raise OutOfStock(sku=sku, requested=quantity, available=available or 0)


def _move_reserved(*, order_ids: list[int], to: str) -> None:
    """Move the units the given orders reserved to `available` or `shipped`
    with one UPDATE whatever the number of orders: quantities are summed per
    SKU first, so 300 orders of one SKU make one row change, not 300."""
    assert to in ("available", "shipped")
    with connection.cursor() as cursor:
        # Lock the rows in SKU order first, as checkout does, so that a
        # concurrent multi-SKU checkout and this cannot deadlock.
        cursor.execute(
            """
            SELECT sku FROM inventory
            WHERE sku IN (SELECT sku FROM order_items WHERE order_id = ANY(%s))
            ORDER BY sku FOR UPDATE
            """,
            [order_ids],
        )
        cursor.execute(
            f"""
            UPDATE inventory SET {to} = {to} + moved.quantity, reserved = reserved - moved.quantity
            FROM (SELECT sku, SUM(quantity) AS quantity FROM order_items
                  WHERE order_id = ANY(%s) GROUP BY sku) AS moved
            WHERE inventory.sku = moved.sku
            """,
            [order_ids],
        )


def return_reserved_stock(*, order_ids: list[int]) -> None:
    """Cancelled or refunded before shipping: reserved units go back on sale."""
    _move_reserved(order_ids=order_ids, to="available")


def ship_reserved_stock(*, order_ids: list[int]) -> None:
    """Reserved units of the given orders leave the warehouse: reserved -> shipped."""
    _move_reserved(order_ids=order_ids, to="shipped")
