from django.core.management.base import BaseCommand

from orders.selectors import flash_sale_status


class Command(BaseCommand):
    help = "Show each gated SKU: the Redis gate counter next to the database stock, orders and refusals."

    def add_arguments(self, parser):
        parser.add_argument("sku", nargs="?")

    def handle(self, *args, sku, **options):
        rows = flash_sale_status(sku=sku)
        if not rows:
            self.stdout.write("no flash sale" + (f" for {sku}" if sku else "s"))
            return
        header = (
            f"{'sku':<24}{'mode':>7}{'gate':>10}{'available':>11}{'reserved':>10}"
            f"{'ordered':>9}{'refused':>9}{'limit':>7}  window (UTC)"
        )
        self.stdout.write(header)
        for row in rows:
            gate = "LOST" if row.gate_remaining is None else row.gate_remaining
            self.stdout.write(
                f"{row.sku:<24}{row.mode:>7}{gate:>10}{row.available:>11}{row.reserved:>10}"
                f"{row.units_ordered:>9}{row.refused:>9}{row.per_customer_limit or '-':>7}  {_window(row)}"
            )


def _window(row) -> str:
    ends = f"{row.ends_at:%Y-%m-%d %H:%M:%S}" if row.ends_at else "no end"
    return f"{row.starts_at:%Y-%m-%d %H:%M:%S} to {ends}"
