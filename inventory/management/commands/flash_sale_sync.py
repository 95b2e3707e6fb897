from django.core.management.base import BaseCommand, CommandError

from core.exceptions import NotFound
from inventory.services.flash_sales import sync_flash_sale


class Command(BaseCommand):
    help = "Reset a SKU's gate counter from the database's available stock (after a Redis restart)."

    def add_arguments(self, parser):
        parser.add_argument("sku")

    def handle(self, *args, sku, **options):
        try:
            remaining = sync_flash_sale(sku=sku)
        except NotFound as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"{sku}: gate counter set to {remaining} (database available)")
