from django.core.management.base import BaseCommand, CommandError

from shop.tax_rates import TaxRateFileInvalid, load_tax_rates, read_tax_rates_file


class Command(BaseCommand):
    help = (
        "Load tax rates from a CSV file with columns country,tax_class,rate,valid_from and optionally source "
        "(rate in basis points: 2000 is 20%). All or nothing; loading it again changes nothing. "
        "The shipped EU and UK table: shop/data/tax_rates_eu.csv."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="CSV file: country,tax_class,rate,valid_from[,source] (see shop/tax_rates.py)")

    def handle(self, *args, file, **options):
        try:
            result = load_tax_rates(rows=read_tax_rates_file(file))
        except FileNotFoundError:
            raise CommandError(f"no such file: {file}") from None
        except TaxRateFileInvalid as invalid:
            for error in invalid.errors:
                self.stderr.write(error)
            raise CommandError(f"{len(invalid.errors)} invalid row(s) in {file}; nothing was written") from None
        self.stdout.write(
            f"{result.created + result.updated + result.unchanged} rates: {result.created} created, "
            f"{result.updated} updated, {result.unchanged} unchanged"
        )
