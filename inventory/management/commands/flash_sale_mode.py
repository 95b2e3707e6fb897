from django.core.management.base import BaseCommand, CommandError

from core.exceptions import NotFound
from inventory.models import FlashSale
from inventory.services.flash_sales import set_flash_sale_mode


class Command(BaseCommand):
    help = "Switch a running flash sale between direct checkouts and the queue (docs/operations.md: when to)."

    def add_arguments(self, parser):
        parser.add_argument("sku")
        parser.add_argument("mode", choices=FlashSale.Mode.values)

    def handle(self, *args, sku, mode, **options):
        try:
            sale = set_flash_sale_mode(sku=sku, mode=mode)
        except NotFound as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"{sku}: {sale.mode} mode")
