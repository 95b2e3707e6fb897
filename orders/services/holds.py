"""Anti-hoarding: the units of each SKU that unpaid orders hold, per customer and
per client address (UnpaidHold), each within its cap.

Checkout takes an order's units for both holders in the order's transaction; an
order leaving PENDING_PAYMENT (paid, cancelled, expired) gives them back. The
sums grow by a conditional upsert and the table's CHECK (units <= cap) backs it.
An established shopper (shop/established.py) holds under no address: their
order's `hold_address` is empty, so their units count per account only.

Raw SQL, here only: the ORM has no upsert whose update adds to the row under a
condition. With it, taking holds is one statement for a whole cart and both
holders (the ORM's conditional UPDATE, then an INSERT for a first hold, was two
statements per line and holder: 4k more for a k-line checkout); giving them back
is one statement for an expiry batch's thousand rows.
"""

from functools import cache

from django.conf import settings
from django.db import connection
from django.db.models import Exists, OuterRef, Q

from core.authentication import remembered_with_users
from core.db import execute_kept
from orders.exceptions import HoldLimitReached
from orders.models import Order, OrderItem, OrderStatus, Payment, UnpaidHold
from shop.established import PAID_ORDER, is_established

_TABLE = UnpaidHold._meta.db_table


@cache
def _take_sql(rows: int) -> str:
    """A VALUES row per (holder, SKU): psycopg dumps arrays element by element in
    Python, and an array per column cost checkout more CPU than the statement."""
    values = ", ".join(["(%s, %s, %s::int, %s::int)"] * rows)
    return f"""
INSERT INTO {_TABLE} AS h (holder, sku, units, cap) VALUES {values}
ON CONFLICT (holder, sku) DO UPDATE SET units = h.units + EXCLUDED.units, cap = EXCLUDED.cap
WHERE h.units + EXCLUDED.units <= EXCLUDED.cap
RETURNING holder, sku
"""


_GIVE_BACK = f"""
UPDATE {_TABLE} AS h SET units = GREATEST(h.units - back.units, 0)
FROM unnest(%s::text[], %s::text[], %s::int[]) AS back (holder, sku, units)
WHERE h.holder = back.holder AND h.sku = back.sku
"""


def customer_holder(customer_id: int) -> str:
    return f"customer:{customer_id}"


def address_holder(address: str) -> str:
    return f"address:{address}"


def hold_address(*, customer_id: int, client_address: str) -> str:
    """The address whose cap the shopper's unpaid holds count against: the
    client's, or none for an established shopper (from what authentication
    remembered of them: no query)."""
    return "" if client_address and is_established(customer_id=customer_id) else client_address


@remembered_with_users
def paid_orders(users: list) -> dict[int, dict]:
    """For each user, whether an order of theirs was paid (PAID, SHIPPED or
    REFUNDED, or with an applied payment: a paid order cancelled since keeps
    it): one query, kept with the user's token (shop/established.py)."""
    ids = [user.pk for user in users]
    applied = Payment.objects.filter(order=OuterRef("pk"), outcome=Payment.Outcome.APPLIED)
    paid = Q(status__in=[OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.REFUNDED]) | Exists(applied)
    payers = set(
        Order.objects.filter(paid, customer_id__in=ids).order_by().values_list("customer_id", flat=True).distinct()
    )
    return {user_id: {PAID_ORDER: user_id in payers} for user_id in ids}


def take_holds(*, customer_id: int, address: str, lines: dict[str, int]) -> None:
    """Add the order's units to the customer's and the address's holds, inside
    the caller's transaction; HoldLimitReached (nothing taken once the caller
    rolls back) when either would pass its cap."""
    holders = [(customer_holder(customer_id), settings.MAX_UNPAID_UNITS_PER_SKU)]
    if address:
        holders.append((address_holder(address), settings.MAX_UNPAID_UNITS_PER_ADDRESS))
    rows = [(holder, sku, units, cap) for holder, cap in holders for sku, units in sorted(lines.items())]
    for _, sku, units, cap in rows:
        if units > cap:  # a first hold is an INSERT, which the upsert's condition does not cover
            raise HoldLimitReached(sku=sku, limit=cap)
    taken = set(execute_kept(_take_sql(len(rows)), [value for row in rows for value in row]).fetchall())
    for holder, sku, _, cap in rows:
        if (holder, sku) not in taken:
            raise HoldLimitReached(sku=sku, limit=cap)


def give_back_holds(*, order_ids: list[int]) -> None:
    """The holds of those orders that took some, given back (they left
    PENDING_PAYMENT in the caller's transaction): one statement."""
    rows = OrderItem.objects.filter(order_id__in=order_ids, order__holds_units=True).values_list(
        "order__customer_id", "order__hold_address", "product_id", "quantity"
    )
    back: dict[tuple[str, str], int] = {}
    for customer_id, address, sku, quantity in rows:
        holders = [customer_holder(customer_id)] + ([address_holder(address)] if address else [])
        for holder in holders:
            back[(holder, sku)] = back.get((holder, sku), 0) + quantity
    if not back:
        return
    with connection.cursor() as cursor:
        cursor.execute(_GIVE_BACK, [[h for h, _ in back], [s for _, s in back], list(back.values())])


def held_units(*, sku: str, customer_id: int | None = None, address: str | None = None) -> int:
    holder = customer_holder(customer_id) if customer_id is not None else address_holder(address or "")
    return UnpaidHold.objects.filter(holder=holder, product_id=sku).values_list("units", flat=True).first() or 0
