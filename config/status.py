"""What `manage.py shop_status` shows: read-only figures from every app, from
PostgreSQL, Redis and Kafka. It lives in the wiring layer because it looks at all of them."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from orders.models import Order, OrderStatus
from orders.queue_writer import WRITER_GROUP
from orders.selectors import flash_sale_status
from orders.services.authorizations import authorizations_ending
from orders.services.queue_admission import queue_depths, stale_queued
from outbox.lag import consumer_positions
from outbox.services import backlog


def shop_status() -> dict:
    now = timezone.now()
    pending = Order.objects.filter(status=OrderStatus.PENDING_PAYMENT)
    outbox = backlog(now=now)
    try:
        sales = flash_sale_status()
    except Exception:
        sales = []
    return {
        "pending_orders": pending.count(),
        "expiring_soon": pending.filter(expires_at__lte=now + timedelta(minutes=1)).count(),
        "outbox_backlog": outbox.waiting,
        "outbox_oldest_age_seconds": outbox.oldest_age_seconds,
        "consumers": consumer_positions(extra={WRITER_GROUP: settings.KAFKA_CHECKOUT_TOPIC}, timeout=2.0),
        "flash_sales": sales,
        "queued": _from_redis(queue_depths),
        "stale": _from_redis(stale_queued),
        "authorizations_ending": list(
            authorizations_ending(now=now).values_list("order_id", "authorization_ends_at", "provider_payment_id")
        ),
        "payments_lapsed": Order.objects.filter(status=OrderStatus.PAYMENT_LAPSED).count(),
    }


def _from_redis(per_sku) -> dict[str, int]:
    """Per SKU, the queue's checkouts admitted and not yet written (or stale)."""
    try:
        return per_sku()
    except Exception:  # Redis down: say nothing here, the rest still shows
        return {}
