from django.core.management.base import BaseCommand

from orders.services import expire_unpaid_orders


class Command(BaseCommand):
    help = "Cancel unpaid orders past their payment deadline (once) and return their stock."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=None)

    def handle(self, *args, batch_size, **options):
        count = expire_unpaid_orders(batch_size=batch_size)
        self.stdout.write(f"{count} order(s) expired")
