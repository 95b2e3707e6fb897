from django.core.management.base import BaseCommand, CommandError

from inventory.services import stock_audit


class Command(BaseCommand):
    help = "Check stock conservation: received - written off == available + reserved + shipped, per SKU."

    def add_arguments(self, parser):
        parser.add_argument("skus", nargs="*", help="only these SKUs (default: all)")

    def handle(self, *args, skus, **options):
        rows = stock_audit(skus=skus or None)
        wrong = [row for row in rows if row["difference"]]
        for row in wrong:
            self.stdout.write(
                f"{row['sku']}: ledger {row['ledger_net']} != on hand {row['on_hand']} "
                f"(available {row['available']}, reserved {row['reserved']}, shipped {row['shipped']}): "
                f"difference {row['difference']:+d}"
            )
        self.stdout.write(f"{len(rows)} SKU(s) audited, {len(wrong)} with a difference")
        if wrong:
            raise CommandError("stock is not conserved")
