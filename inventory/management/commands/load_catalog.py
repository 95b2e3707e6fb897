from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from inventory.catalog_import import CatalogFileInvalid, import_catalog, read_catalog_file


class Command(BaseCommand):
    help = (
        "Load products and stock from a CSV file with columns sku,name,price,stock, then optionally any of "
        "description, image_url, weight_grams, tax_class (all or nothing; see inventory/catalog_import.py)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "file",
            help="CSV file: sku,name,price,stock[,description,image_url,weight_grams,tax_class] (price in minor units)",
        )

    def handle(self, *args, file, **options):
        try:
            rows = read_catalog_file(file)
        except FileNotFoundError:
            raise CommandError(f"no such file: {file}") from None
        except CatalogFileInvalid as invalid:
            for error in invalid.errors:
                self.stderr.write(error)
            raise CommandError(f"{len(invalid.errors)} invalid row(s) in {file}; nothing was written") from None
        with tqdm(total=len(rows), unit="row", disable=len(rows) < 5000, file=self.stderr) as bar:
            result = import_catalog(rows=rows, progress=bar.update)
        self.stdout.write(
            f"{len(rows)} rows: {result.created} products created, {result.updated} updated, "
            f"{result.stock_movements} stock movements"
        )
