from collections.abc import Iterable, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from core.db import CompiledUpdate
from core.locks import for_update
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


def take_back_returned(
    *, restock: Mapping[str, int], damaged: Mapping[str, int], user: AbstractBaseUser | None = None, note: str = ""
) -> list[StockMovement]:
    """Units a shopper sent back re-enter the stock through the ledger (RETURNED,
    `shipped` keeps counting what left): those fit to sell go back to `available`,
    the damaged ones are written off at once (DAMAGED), so both show in the ledger
    and stock_audit stays at difference 0. Inside the caller's transaction; rows
    locked in SKU order."""
    lock_stock({**restock, **damaged})
    ledger = []
    for sku in sorted(restock):
        if not _with_room_for(sku, restock[sku]).update(available=F("available") + restock[sku]):
            raise StockLimitExceeded(sku=sku, requested=restock[sku])
        ledger.append(StockMovement(product_id=sku, delta=restock[sku], reason=StockMovement.Reason.RETURNED))
    for sku in sorted(damaged):
        ledger += [
            StockMovement(product_id=sku, delta=damaged[sku], reason=StockMovement.Reason.RETURNED),
            StockMovement(product_id=sku, delta=-damaged[sku], reason=StockMovement.Reason.DAMAGED),
        ]
    for entry in ledger:
        entry.note, entry.created_by = note, user
    return StockMovement.objects.bulk_create(ledger)


@transaction.atomic
def set_available_stock(
    *, sku: str, available: int, user: AbstractBaseUser | None = None, note: str = ""
) -> StockMovement | None:
    """Bring `available` to an exact figure, as a delta computed under the row lock
    so that reservations made meanwhile are never overwritten."""
    if available < 0:
        raise ValueError("available cannot be negative")
    Stock.objects.get_or_create(product_id=sku)
    current = lock_stock([sku])[sku]
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


def set_low_stock_threshold(*, sku: str, threshold: int | None) -> None:
    """The SKU's own low-stock threshold; None: the LOW_STOCK_THRESHOLD setting.
    Writes that one column only, never a stock figure read earlier."""
    if threshold is not None and threshold < 0:
        raise ValueError("threshold must not be negative")
    Stock.objects.filter(product_id=sku).update(low_stock_threshold=threshold)


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


def lock_stock(skus: Iterable[str]) -> dict[str, int]:
    """Lock the SKUs' stock rows, always in SKU order: every writer that holds
    several rows takes them in the same order, so none can deadlock another.
    Returns each locked SKU's available units."""
    rows = for_update(Stock.objects.filter(product_id__in=list(skus)))  # the key is the SKU
    return dict(rows.values_list("product_id", "available"))


def reserve_stock(*, lines: Mapping[str, int]) -> None:
    """Move units from available to reserved, all lines or none (the caller's
    transaction rolls back on OutOfStock). One conditional UPDATE per SKU:
    `available >= quantity` is checked by the row update itself, so two
    checkouts can never both take the last unit. SKU order: concurrent orders
    take the row locks in the same order and cannot deadlock."""
    for sku in sorted(lines):
        quantity = lines[sku]
        if not _RESERVE(sku=sku, quantity=quantity):
            available = Stock.objects.filter(product_id=sku).values_list("available", flat=True).first()
            raise OutOfStock(sku=sku, requested=quantity, available=available or 0)


_RESERVE = CompiledUpdate(
    lambda sku, quantity: (
        Stock.objects.filter(product_id=sku, available__gte=quantity),
        {"available": F("available") - quantity, "reserved": F("reserved") + quantity},
    ),
    sku=str,
    quantity=int,
)  # the rule above, compiled once per process (core/db.py)


def _move_reserved(*, lines: Mapping[str, int], to: str) -> None:
    """Move reserved units to `available` or `shipped`. The caller sums its
    orders' quantities per SKU, so 300 orders of one SKU make one row change, and
    SKUs moving the same quantity share one UPDATE: an expiry batch of 1,000
    one-unit orders over 1,000 SKUs is one statement, not 1,000. Moving more
    than was reserved breaks the CHECK (reserved >= 0): an IntegrityError,
    never a silent miscount."""
    lock_stock(lines)
    by_quantity: dict[int, list[str]] = {}
    for sku, quantity in lines.items():
        by_quantity.setdefault(quantity, []).append(sku)
    for quantity, skus in sorted(by_quantity.items()):
        Stock.objects.filter(product_id__in=skus).update(reserved=F("reserved") - quantity, **{to: F(to) + quantity})


def return_reserved_stock(*, lines: Mapping[str, int]) -> None:
    """Cancelled or refunded before shipping: reserved units go back on sale."""
    _move_reserved(lines=lines, to="available")


def ship_reserved_stock(*, lines: Mapping[str, int]) -> None:
    """Reserved units leave the warehouse: reserved -> shipped."""
    _move_reserved(lines=lines, to="shipped")


def set_available_stock_bulk(
    *, targets: Mapping[str, int], user: AbstractBaseUser | None = None, note: str = ""
) -> int:
    """Bring each SKU's `available` to an exact figure, with one ledger entry per
    change (received for a new SKU, a correction for an existing one), computed
    against locked rows so that no reservation is overwritten. Returns the number
    of ledger entries."""
    current = lock_stock(targets)
    new_stocks, changed, ledger = [], {}, []
    for sku in sorted(targets):
        target = targets[sku]
        if sku not in current:
            new_stocks.append(Stock(product_id=sku, available=target))
            delta, reason = target, StockMovement.Reason.RECEIVED
        else:
            delta, reason = target - current[sku], StockMovement.Reason.CORRECTION
            if delta:
                changed[sku] = target
        if delta:
            ledger.append(StockMovement(product_id=sku, delta=delta, reason=reason, created_by=user, note=note))
    Stock.objects.bulk_create(new_stocks)
    if changed:
        # Raw SQL, measured: bulk_update's CASE WHEN was 60% of a catalog
        # re-import (bench/load_catalog.py); one UPDATE from unnest() is not.
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Stock._meta.db_table} AS s SET available = v.available "
                "FROM unnest(%s::text[], %s::int[]) AS v(sku, available) WHERE s.sku = v.sku",
                [list(changed), list(changed.values())],
            )
    StockMovement.objects.bulk_create(ledger)
    return len(ledger)
