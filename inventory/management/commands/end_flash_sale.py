from django.core.management.base import BaseCommand, CommandError

from core.exceptions import NotFound
from inventory.services.flash_sales import end_flash_sale


class Command(BaseCommand):
    help = "Remove a SKU's flash-sale gate; its checkouts go straight to the database again."

    def add_arguments(self, parser):
        parser.add_argument("sku")

    def handle(self, *args, sku, **options):
        try:
            end_flash_sale(sku=sku)
        except NotFound as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"{sku}: flash sale ended, gate removed")
