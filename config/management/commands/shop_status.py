from django.core.management.base import BaseCommand

from config.status import shop_status


class Command(BaseCommand):
    help = "One screen: pending orders, outbox backlog, consumer positions, flash-sale gates."

    def handle(self, *args, **options):
        status = shop_status()
        w = self.stdout.write
        w(f"orders pending payment:   {status['pending_orders']}")
        w(f"  expiring in next minute:{status['expiring_soon']:>5}")
        age = status["outbox_oldest_age_seconds"]
        w(f"outbox waiting for Kafka: {status['outbox_backlog']}" + (f" (oldest {age:.0f} s)" if age else ""))
        w("consumers (committed offset / end of partition, summed):")
        for name, position in status["consumers"].items():
            if "error" in position:
                w(f"  {name:<10} unavailable: {position['error']}")
            else:
                w(f"  {name:<10} {position['committed']:>8} / {position['end']:<8} lag {position['lag']}")
        w("flash sales (gate counter, database available/reserved, refused):")
        for sale in status["flash_sales"]:
            gate = "LOST" if sale.gate_remaining is None else sale.gate_remaining
            w(f"  {sale.sku:<20} gate {gate:<6} db {sale.available}/{sale.reserved}  refused {sale.refused}")
        if not status["flash_sales"]:
            w("  none")
