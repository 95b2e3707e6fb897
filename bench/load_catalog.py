"""Time `manage.py load_catalog` on a generated CSV of 100,000 rows: a first
import (all new SKUs) and a re-import with changed prices and stock.

    .venv/bin/python bench/load_catalog.py [--rows 100000]

Uses the development database; the BENCH-CAT- products it creates are removed
at the end (with their stock and ledger rows).
"""

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import setup_django  # noqa: E402

PREFIX = "BENCH-CAT-"


def write_csv(path: str, rows: int, *, price_bump: int = 0, stock_bump: int = 0) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["sku", "name", "price", "stock"])
        for i in range(rows):
            price, stock = 100 + i % 5000 + price_bump, i % 50 + stock_bump
            writer.writerow([f"{PREFIX}{i:07d}", f"Bench product {i}", price, stock])


def cleanup() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        pattern = PREFIX.replace("-", "\\-").replace("_", "\\_") + "%"
        cursor.execute("DELETE FROM inventory_stockmovement WHERE sku LIKE %s", [pattern])
        cursor.execute("DELETE FROM inventory WHERE sku LIKE %s", [pattern])
        cursor.execute("DELETE FROM shop_product WHERE sku LIKE %s", [pattern])


def timed_import(path: str) -> tuple[float, str]:
    from io import StringIO

    from django.core.management import call_command

    out, err = StringIO(), StringIO()
    started = time.perf_counter()
    call_command("load_catalog", path, stdout=out, stderr=err)
    return time.perf_counter() - started, out.getvalue().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    setup_django()
    cleanup()
    with tempfile.TemporaryDirectory() as tmp:
        first, second = os.path.join(tmp, "first.csv"), os.path.join(tmp, "second.csv")
        write_csv(first, args.rows)
        write_csv(second, args.rows, price_bump=1, stock_bump=3)
        try:
            for label, path in (("first import", first), ("re-import", second)):
                seconds, summary = timed_import(path)
                rate = args.rows / seconds
                print(f"{label:<14} {args.rows:>9,} rows in {seconds:6.2f} s = {rate:>9,.0f} rows/s  ({summary})")
            from inventory.services import stock_audit

            skus = [f"{PREFIX}{i:07d}" for i in range(0, args.rows, max(1, args.rows // 1000))]
            unbalanced = [row for row in stock_audit(skus=skus) if row["difference"]]
            print(f"stock audit on {len(skus)} sampled SKUs: {len(unbalanced)} unbalanced")
        finally:
            cleanup()


if __name__ == "__main__":
    main()
