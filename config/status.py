"""What `manage.py shop_status` shows: read-only figures from every app, from
PostgreSQL, Redis and Kafka. It lives in the wiring layer because it looks at all of them."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from orders.models import Order, OrderStatus
from orders.queue_writer import WRITER_GROUP
from orders.selectors import flash_sale_status
from orders.services.queue import queue_depths
from outbox.lag import consumer_positions
from outbox.services import backlog


def shop_status() -> dict:
    now = timezone.now()
    pending = Order.objects.filter(status=OrderStatus.PENDING_PAYMENT)
    waiting, oldest = backlog()
    try:
        sales = flash_sale_status()
    except Exception:
        sales = []
    return {
        "pending_orders": pending.count(),
        "expiring_soon": pending.filter(expires_at__lte=now + timedelta(minutes=1)).count(),
        "outbox_backlog": waiting,
        "outbox_oldest_age_seconds": (now - oldest).total_seconds() if oldest else None,
        "consumers": consumer_positions(extra={WRITER_GROUP: settings.KAFKA_CHECKOUT_TOPIC}),
        "flash_sales": sales,
        "queued": _queue_depths(),
    }


def _queue_depths() -> dict[str, int]:
    """Per queue-mode SKU, the checkouts admitted and not yet written."""
    try:
        return queue_depths()
    except Exception:  # Redis down: say nothing here, the rest still shows
        return {}
