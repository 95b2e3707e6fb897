from django.core.management.base import BaseCommand, CommandError

from core.moments import iso_moment
from inventory.models import FlashSale
from inventory.services.flash_sales import KEEP, seed_flash_sale


class Command(BaseCommand):
    help = "Put a SKU on flash sale: exactly N units available in the database and the same N in the Redis gate."

    def add_arguments(self, parser):
        parser.add_argument("sku")
        parser.add_argument("--stock", type=int, required=True)
        parser.add_argument("--price", type=int, help="minor units (required for a new product)")
        parser.add_argument("--name")
        parser.add_argument("--per-customer-limit", type=int)
        parser.add_argument(
            "--mode",
            choices=FlashSale.Mode.values,
            default="direct",
            help="queue: admitted checkouts go through Kafka to write_queued_orders (default direct)",
        )
        parser.add_argument(
            "--sale-price", type=int, help="minor units a unit costs inside the window (default: the catalog price)"
        )
        parser.add_argument(
            "--starts-at", type=iso_moment, help="ISO 8601: the gate admits from then (default now; a re-seed keeps it)"
        )
        parser.add_argument(
            "--ends-at", type=iso_moment, help="ISO 8601: the gate refuses from then (default none; a re-seed keeps it)"
        )

    def handle(self, *args, sku, stock, price, name, per_customer_limit, mode, sale_price, starts_at, ends_at, **_):
        if stock < 0:
            raise CommandError("--stock must be 0 or more")
        if sale_price is not None and sale_price < 1:
            raise CommandError("--sale-price must be 1 or more")
        if per_customer_limit is not None and per_customer_limit < 1:
            raise CommandError("--per-customer-limit must be 1 or more")
        try:
            sale = seed_flash_sale(
                sku=sku,
                stock=stock,
                price=price,
                name=name,
                per_customer_limit=per_customer_limit,
                mode=mode,
                starts_at=starts_at,
                ends_at=KEEP if ends_at is None else ends_at,
                sale_price=KEEP if sale_price is None else sale_price,
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        limit = sale.per_customer_limit or "none"
        self.stdout.write(
            f"{sku}: flash sale open with {stock} units (database available = gate counter = {stock}), "
            f"per-customer limit {limit}, {sale.mode} mode, at {sale.sale_price or 'the catalog price'}, "
            f"from {sale.starts_at.isoformat()} "
            f"until {sale.ends_at.isoformat() if sale.ends_at else 'no end'}"
        )
