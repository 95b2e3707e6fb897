from django.core.management.base import BaseCommand, CommandError

from core.exceptions import DomainError
from orders.services import mark_order_shipped


class Command(BaseCommand):
    help = (
        "Mark paid orders shipped, as the admin's action does: each payment captured first; "
        "an order whose capture is refused or cannot be asked for stays unshipped, and says why."
    )

    def add_arguments(self, parser):
        parser.add_argument("order_ids", type=int, nargs="+")

    def handle(self, *args, order_ids, **options):
        failed = 0
        for order_id in order_ids:
            try:
                mark_order_shipped(order_id=order_id)
            except DomainError as refused:
                failed += 1
                self.stderr.write(f"order {order_id}: {refused.message}")
            else:
                self.stdout.write(f"order {order_id}: captured and shipped")
        if failed:
            raise CommandError(f"{failed} of {len(order_ids)} order(s) not shipped")
