"""Catalog import from CSV (`sku,name,price,stock`, optionally followed, in any
order, by `description`, `image_url`, `weight_grams` (whole grams, 0 for goods
that do not ship) and `tax_class` (the code of an existing tax class, e.g.
`standard`, `reduced`)): every row is checked before anything is written, then
the whole file goes in one transaction. A file without an optional column
leaves that field of existing products as it is, and gives new ones the
field's default (weight 0, tax class `standard`)."""

import csv
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

from core.hotcache import bump_generation_on_commit
from inventory.models import MAX_UNITS
from inventory.services import set_available_stock_bulk
from shop.models import MAX_PRICE, MAX_WEIGHT_GRAMS, SKU_PATTERN, Product, TaxClass

COLUMNS = ["sku", "name", "price", "stock"]
OPTIONAL_COLUMNS = ["description", "image_url", "weight_grams", "tax_class"]
_URL = URLValidator(schemes=["http", "https"])
BATCH_SIZE = 2000
_SKU = re.compile(SKU_PATTERN)
_INTEGER = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class CatalogRow:
    line: int
    sku: str
    name: str
    price: int
    stock: int
    extra: dict[str, str | int]  # the optional columns the file has, as Product's fields take them


@dataclass(frozen=True)
class ImportResult:
    created: int
    updated: int
    stock_movements: int


class CatalogFileInvalid(Exception):
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(f"{len(errors)} invalid row(s)")


def parse_catalog(lines: Iterable[str]) -> list[CatalogRow]:
    """Parse and validate the whole file; raise CatalogFileInvalid listing every bad row."""
    reader = csv.reader(lines)
    header = [h.strip().lower() for h in next(reader, None) or []]
    optional = header[len(COLUMNS) :]
    if header[: len(COLUMNS)] != COLUMNS or len(set(optional)) < len(optional) or set(optional) - set(OPTIONAL_COLUMNS):
        expected = f"{','.join(COLUMNS)}, then optionally any of {', '.join(OPTIONAL_COLUMNS)}"
        raise CatalogFileInvalid([f"line 1: the header must be {expected}, got {header!r}"])
    rows, errors, seen = [], [], {}
    # Read once, only for a file with the column: the parse is otherwise the file's alone.
    tax_classes = set(TaxClass.objects.values_list("code", flat=True)) if "tax_class" in optional else set()
    for values in reader:
        line = reader.line_num
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(header):
            errors.append(f"line {line}: expected {len(header)} columns, got {len(values)}")
            continue
        sku, name, price, stock = (v.strip() for v in values[: len(COLUMNS)])
        extra = dict(zip(optional, (v.strip() for v in values[len(COLUMNS) :]), strict=True))
        problems = _extra_problems(extra, tax_classes)
        if not _SKU.match(sku):
            problems.append(f"sku {sku!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")
        elif sku in seen:
            problems.append(f"sku {sku} already on line {seen[sku]}")
        if not name or len(name) > 200:
            problems.append("name must be 1-200 characters")
        if not _INTEGER.match(price) or not 0 < int(price) <= MAX_PRICE:
            problems.append(f"price {price!r} must be a whole number of minor units, 1 to {MAX_PRICE}")
        if not _INTEGER.match(stock) or int(stock) > MAX_UNITS:
            problems.append(f"stock {stock!r} must be a whole number, 0 to {MAX_UNITS}")
        if problems:
            errors.append(f"line {line}: " + "; ".join(problems))
            continue
        seen[sku] = line
        typed: dict[str, str | int] = {**extra}
        if "weight_grams" in extra:
            typed["weight_grams"] = int(extra["weight_grams"])
        rows.append(CatalogRow(line, sku, name, int(price), int(stock), typed))
    if errors:
        raise CatalogFileInvalid(errors)
    return rows


def _extra_problems(extra: dict[str, str], tax_classes: set[str]) -> list[str]:
    problems = []
    if "weight_grams" in extra:
        weight = extra["weight_grams"]
        if not _INTEGER.match(weight) or int(weight) > MAX_WEIGHT_GRAMS:
            problems.append(f"weight_grams {weight!r} must be a whole number of grams, 0 to {MAX_WEIGHT_GRAMS}")
    if "tax_class" in extra and extra["tax_class"] not in tax_classes:
        known = ", ".join(sorted(tax_classes)) or "none"
        problems.append(f"tax_class {extra['tax_class']!r} does not exist (there are: {known})")
    if len(extra.get("description", "")) > 5000:
        problems.append("description must be at most 5000 characters")
    if url := extra.get("image_url"):
        try:
            if len(url) > 500:
                raise ValidationError("too long")
            _URL(url)
        except ValidationError:
            problems.append(f"image_url {url[:80]!r} must be an http(s) URL of at most 500 characters")
    return problems


def _fields(extra: dict[str, str | int]) -> dict[str, str | int]:
    """The optional columns as Product() takes them: the tax class by its code (the key)."""
    return {"tax_class_id" if column == "tax_class" else column: value for column, value in extra.items()}


def read_catalog_file(path: str) -> list[CatalogRow]:
    with open(path, newline="", encoding="utf-8-sig") as file:
        return parse_catalog(file)


@transaction.atomic
def import_catalog(
    *,
    rows: list[CatalogRow],
    user: AbstractBaseUser | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Upsert products; bring each SKU's available stock to the file's figure
    through the ledger (received for a new SKU, a correction for an existing one).

    The stock side is inventory's set_available_stock_bulk: rows locked in SKU
    order, the delta computed against a figure no reservation can change."""
    created = updated = movements = 0
    now = timezone.now()
    for start in range(0, len(rows), BATCH_SIZE):
        batch = sorted(rows[start : start + BATCH_SIZE], key=lambda row: row.sku)
        skus = [row.sku for row in batch]
        existing = set(Product.objects.filter(sku__in=skus).values_list("sku", flat=True))
        optional = sorted(batch[0].extra)  # the same columns on every row of a file (field names)
        Product.objects.bulk_create(
            [
                Product(sku=r.sku, name=r.name, price=r.price, created_at=now, updated_at=now, **_fields(r.extra))
                for r in batch
            ],
            update_conflicts=True,
            unique_fields=["sku"],
            update_fields=["name", "price", "updated_at", *optional],
        )
        created += len(batch) - len(existing)
        updated += len(existing)

        movements += set_available_stock_bulk(
            targets={row.sku: row.stock for row in batch}, user=user, note="catalog import"
        )
        if progress:
            progress(len(batch))
    bump_generation_on_commit()
    return ImportResult(created=created, updated=updated, stock_movements=movements)
