"""The one order in which the shop's writers lock rows.

Two transactions that lock the same rows in opposite orders can deadlock:
PostgreSQL then kills one of them. Every service that locks rows of more than
one kind takes them in the order below, each kind's rows in key order, and
takes its explicit locks through `for_update`. A row lock is also taken by an
UPDATE, a DELETE and an INSERT … ON CONFLICT DO UPDATE, so the order holds
for those statements too: tests/orders/test_lock_order.py records the locking
statements of every such service and fails on one that goes backwards.

The order lives here, below every app, because the rows belong to several
apps (orders, shop, inventory) and each must be able to read it; it names
tables, not models, so that it imports none of them. A group is one rank:
rows that are only ever locked under the lock of the group's first table
(a voucher's per-shopper count and its redemptions are written under the
voucher's row; a refund under its payment's)."""

from django.db.models import QuerySet

LOCK_ORDER: tuple[tuple[str, ...], ...] = (
    ("orders",),  # an order: every writer of an existing order locks it first
    ("orders_return", "orders_returnline"),  # its returns
    ("order_items",),  # its lines, in id order
    ("orders_payment", "orders_refund"),  # its payment, and the payment's refunds
    ("order_pending_counts",),  # the shopper's count of unpaid orders
    ("order_unpaid_holds",),  # units that unpaid orders hold, per shopper and address
    ("inventory_flashsale",),  # a flash sale (its price is a promotion, written under the sale's lock)
    ("shop_promotion", "shop_vouchercustomeruse", "shop_voucherredemption"),  # vouchers, in id order
    ("inventory",),  # stock, in SKU order
    ("inventory_shipment",),  # the warehouse's shipment of an order
)

RANK: dict[str, int] = {table: rank for rank, group in enumerate(LOCK_ORDER) for table in group}


def for_update(queryset: QuerySet, *, of: tuple[str, ...] = (), skip_locked: bool = False) -> QuerySet:
    """The rows of `queryset` locked in primary-key order: the one way the shop
    takes an explicit row lock (the order of several kinds is LOCK_ORDER;
    within a kind, the key). FOR NO KEY UPDATE, the lock an UPDATE that keeps
    the key takes: it does not block the KEY SHARE lock that inserting a row
    referring to this one takes (a refund of a locked order), so inserts never
    wait on these locks and cannot deadlock with them. With `skip_locked` the queryset keeps
    its own order: a lock that skips rows never waits, so it cannot deadlock."""
    locked = queryset.select_for_update(of=of, skip_locked=skip_locked, no_key=True)
    return locked if skip_locked else locked.order_by("pk")
