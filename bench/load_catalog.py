"""`manage.py load_catalog` on a generated CSV: a first import and a re-import, rows/s (bench/README.md).

python -m bench.load_catalog [--rows 100000]"""

import csv
import tempfile
import time
from io import StringIO
from pathlib import Path

from django.core.management import call_command

from bench import harness as h
from inventory.services import stock_audit

PREFIX = "BENCH-CAT-"


def write_csv(path: Path, rows: int, *, bump: int = 0) -> None:
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["sku", "name", "price", "stock"])
        for i in range(rows):
            writer.writerow([f"{PREFIX}{i:07d}", f"Bench product {i}", 100 + i % 5000 + bump, i % 50 + 3 * bump])


def main() -> None:
    args = h.parser(__doc__, rows=(100_000, "rows of the CSV")).parse_args()
    h.setup()
    h.delete_products(PREFIX)
    with tempfile.TemporaryDirectory() as tmp:
        first, second = Path(tmp, "first.csv"), Path(tmp, "second.csv")
        write_csv(first, args.rows)
        write_csv(second, args.rows, bump=1)
        try:
            for label, path in (("first import", first), ("re-import", second)):
                out, started = StringIO(), time.perf_counter()
                call_command("load_catalog", str(path), stdout=out, stderr=StringIO())
                seconds = time.perf_counter() - started
                rate = f"{args.rows:>9,} rows in {seconds:6.2f} s = {args.rows / seconds:>9,.0f} rows/s"
                print(f"{label:<14} {rate}  ({out.getvalue().strip()})")
            skus = [f"{PREFIX}{i:07d}" for i in range(0, args.rows, max(1, args.rows // 1000))]
            unbalanced = [row for row in stock_audit(skus=skus) if row["difference"]]
            print(f"stock audit on {len(skus)} sampled SKUs: {len(unbalanced)} unbalanced")
        finally:
            h.delete_products(PREFIX)


if __name__ == "__main__":
    main()
