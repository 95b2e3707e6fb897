"""Tax rates loaded from CSV (`manage.py load_tax_rates`; the shipped table:
shop/data/README.md): every row is checked before anything is written, then
the whole file goes in one transaction, or nothing does.

Columns, in any order: `country` (ISO 3166-1 alpha-2, any case), `tax_class`
(the code of an existing TaxClass: the file never creates one), `rate` (basis
points, a whole number 0-10000: 2000 is 20%, 550 is 5.5%; a percentage such
as "20.0" is refused, not guessed at), `valid_from` (YYYY-MM-DD), and
optionally `source` (where the rate was read, at most 200 characters).

A row is keyed by (tax_class, country, valid_from), as TaxRate's unique
constraint: loading a file again changes nothing; a row whose rate (or
source, when the file has the column) differs is updated. A file without
`source` leaves the source of rates already stored as it is."""

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from django.db import transaction
from django_countries import countries

from shop.models import TaxClass, TaxRate

SHIPPED_TAX_RATES = Path(__file__).parent / "data" / "tax_rates_eu.csv"  # shop/data/README.md
REQUIRED_COLUMNS = ("country", "tax_class", "rate", "valid_from")
OPTIONAL_COLUMNS = ("source",)
MAX_RATE = 10_000  # basis points: 100%
MAX_SOURCE = 200  # TaxRate.source
_INTEGER = re.compile(r"^[0-9]+$")
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


@dataclass(frozen=True)
class TaxRateRow:
    line: int
    country: str
    tax_class: str
    rate: int  # basis points
    valid_from: date
    source: str | None  # None: the file has no source column


@dataclass(frozen=True)
class LoadResult:
    created: int
    updated: int
    unchanged: int


class TaxRateFileInvalid(Exception):
    """The file's problems, one message per bad line, each naming its line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(f"{len(errors)} invalid row(s)")


def parse_tax_rates(lines: Iterable[str]) -> list[TaxRateRow]:
    """Parse and check the whole file (the tax classes are checked by load_tax_rates);
    raise TaxRateFileInvalid listing every bad line."""
    reader = csv.reader(lines)
    header = [name.strip().lower() for name in next(reader, None) or []]
    if (
        sorted(header) != sorted(set(header))
        or not set(REQUIRED_COLUMNS) <= set(header)
        or set(header) - {*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS}
    ):
        expected = f"{','.join(REQUIRED_COLUMNS)}, optionally {','.join(OPTIONAL_COLUMNS)}, in any order"
        raise TaxRateFileInvalid([f"line 1: the header must be {expected}; got {','.join(header) or 'nothing'}"])
    rows: list[TaxRateRow] = []
    errors: list[str] = []
    seen: dict[tuple[str, str, date], int] = {}
    for values in reader:
        line = reader.line_num
        if not values or all(not value.strip() for value in values):
            continue
        if len(values) != len(header):
            errors.append(f"line {line}: expected {len(header)} columns, got {len(values)}")
            continue
        fields = dict(zip(header, (value.strip() for value in values), strict=True))
        problems: list[str] = []
        country = fields["country"].upper()
        if country not in countries:  # alpha-2 keys only: "GBR", "826" and "UK" are not in it
            problems.append(f"country {fields['country']!r} is not an ISO 3166-1 alpha-2 code (e.g. GB, DE)")
        tax_class = fields["tax_class"]
        if not tax_class:
            problems.append("tax_class is empty")
        rate = fields["rate"]
        if not _INTEGER.match(rate) or int(rate) > MAX_RATE:
            problems.append(f"rate {rate!r} must be whole basis points, 0 to {MAX_RATE} (2000 is 20%, 550 is 5.5%)")
        valid_from = _date(fields["valid_from"])
        if valid_from is None:
            problems.append(f"valid_from {fields['valid_from']!r} must be a date, YYYY-MM-DD")
        source = fields.get("source")
        if source is not None and len(source) > MAX_SOURCE:
            problems.append(f"source must be at most {MAX_SOURCE} characters")
        if not problems:
            key = (tax_class, country, valid_from)
            if key in seen:
                problems.append(f"{country} {tax_class} from {valid_from} already on line {seen[key]}")
            else:
                seen[key] = line
        if problems:
            errors.append(f"line {line}: " + "; ".join(problems))
            continue
        rows.append(TaxRateRow(line, country, tax_class, int(rate), valid_from, source))
    if errors:
        raise TaxRateFileInvalid(errors)
    return rows


def _date(text: str) -> date | None:
    if not _DATE.match(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:  # 2026-02-30
        return None


def read_tax_rates_file(path: str) -> list[TaxRateRow]:
    with open(path, newline="", encoding="utf-8-sig") as file:
        return parse_tax_rates(file)


@transaction.atomic
def load_tax_rates(*, rows: list[TaxRateRow]) -> LoadResult:
    """Create or update each row's rate, keyed by (tax_class, country, valid_from).
    A row naming a tax class that does not exist refuses the whole file
    (TaxRateFileInvalid naming its lines): tax classes are made by staff, and
    a typing error must not become a class no product is in.

    Each saved rate moves the caches' generation (shop/signals.py); an
    unchanged row is not saved, so loading the same file again moves nothing."""
    known = set(TaxClass.objects.values_list("code", flat=True))
    if unknown := [row for row in rows if row.tax_class not in known]:
        classes = ", ".join(sorted(known)) or "none"
        raise TaxRateFileInvalid(
            [f"line {row.line}: tax_class {row.tax_class!r} does not exist (there are: {classes})" for row in unknown]
        )
    created = updated = unchanged = 0
    for row in rows:
        defaults: dict[str, object] = {"rate": row.rate}
        if row.source is not None:
            defaults["source"] = row.source
        key = {"tax_class_id": row.tax_class, "country": row.country, "valid_from": row.valid_from}
        current = TaxRate.objects.filter(**key).values(*defaults).first()
        if current == defaults:
            unchanged += 1
            continue
        _, was_created = TaxRate.objects.update_or_create(**key, defaults=defaults)
        if was_created:
            created += 1
        else:
            updated += 1
    return LoadResult(created=created, updated=updated, unchanged=unchanged)
