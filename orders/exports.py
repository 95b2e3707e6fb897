"""Orders as CSV, streamed: rows are read in chunks and written as they go, so an
export of 100,000 orders never holds them all in memory.

A cell a spreadsheet would run as a formula (it starts with = + - @, or a tab
or carriage return) gets a leading apostrophe: a shopper's name is data, not a
formula (OWASP's CSV injection advice)."""

import csv
from collections.abc import Iterator

from django.contrib.postgres.aggregates import StringAgg
from django.db.models import CharField, F, QuerySet, Value
from django.db.models.functions import Cast, Concat

from orders.models import Order

HEADER = [
    "id",
    "created_at",
    "status",
    "customer",
    "email",
    "total",
    "currency",
    "items",
    "paid_at",
    "shipped_at",
    "cancelled_at",
    "ship_to_country",
    "net",
    "tax",
    "shipping",
    "shipping_method",
]
CHUNK = 2000
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralised(value) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(_FORMULA_START) else text


class _Echo:
    """A file whose write() returns what it was given: csv.writer then yields lines."""

    def write(self, value: str) -> str:
        return value


def order_rows(orders: QuerySet[Order]) -> Iterator[list]:
    items = StringAgg(
        Concat(Cast("items__quantity", CharField()), Value(" x "), F("items__product_id")),
        delimiter="; ",
        ordering="items__product_id",
    )
    rows = (
        orders.order_by("-id")
        .annotate(item_list=items, net=F("total_amount") - F("tax_amount"))
        .values_list(
            "id",
            "created_at",
            "status",
            "customer__username",
            "customer__email",
            "total_amount",
            "currency",
            "item_list",
            "paid_at",
            "shipped_at",
            "cancelled_at",
            "shipping_address__country",
            "net",
            "tax_amount",
            "shipping_amount",
            "shipping__code",
        )
    )
    yield HEADER
    for row in rows.iterator(chunk_size=CHUNK):
        yield [neutralised(value.isoformat() if hasattr(value, "isoformat") else value) for value in row]


def csv_lines(orders: QuerySet[Order]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    return (writer.writerow(row) for row in order_rows(orders))
