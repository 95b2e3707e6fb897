from django.conf import settings
from django.core.management.base import BaseCommand

from config.status import shop_status
from inventory.models import FlashSale


class Command(BaseCommand):
    help = "One screen: pending orders, outbox backlog, consumer positions (the order writer too), flash sales."

    def handle(self, *args, **options):
        status = shop_status()
        w = self.stdout.write
        w(f"orders pending payment:   {status['pending_orders']}")
        w(f"  expiring in next minute:{status['expiring_soon']:>5}")
        ending = status["authorizations_ending"]
        w(f"paid, not shipped, authorization ending within a day: {len(ending)}")
        for order_id, ends_at, payment_id in ending:
            w(f"  order {order_id:<8} {payment_id:<32} held until {ends_at:%Y-%m-%d %H:%M} UTC")
        w(f"orders whose payment lapsed (pay again or cancel): {status['payments_lapsed']}")
        age = status["outbox_oldest_age_seconds"]
        w(f"outbox waiting for Kafka: {status['outbox_backlog']}" + (f" (oldest {age:.0f} s)" if age else ""))
        w("consumers (committed offset / end of partition, summed):")
        for name, position in status["consumers"].items():
            if "error" in position:
                w(f"  {name:<12} unavailable: {position['error']}")
            else:
                w(f"  {name:<12} {position['committed']:>8} / {position['end']:<8} lag {position['lag']}")
        w("flash sales (gate counter, database available/reserved, refused):")
        for sale in status["flash_sales"]:
            gate = "LOST" if sale.gate_remaining is None else sale.gate_remaining
            line = f"  {sale.sku:<20} {sale.mode:<6} gate {gate:<6} db {sale.available}/{sale.reserved}"
            line += f"  refused {sale.refused}"
            queued, stale = status["queued"].get(sale.sku, 0), status["stale"].get(sale.sku, 0)
            if sale.mode == FlashSale.Mode.QUEUE or queued:
                line += f"  queued (not yet written) {queued}"
            if stale:
                line += f"  STALE {stale} (queued over {settings.QUEUE_STALE_AFTER_SECONDS} s ago, not written)"
            w(line)
        if not status["flash_sales"]:
            w("  none")
