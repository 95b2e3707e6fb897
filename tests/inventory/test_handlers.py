"""inventory/handlers.py: the warehouse consumer's shipments, applied through the
same once-only path the Kafka runner uses."""

import pytest

from inventory.models import Shipment
from outbox.consumers import apply_event
from tests.helpers import order_paid_event

pytestmark = pytest.mark.django_db


def test_warehouse_requests_one_shipment_per_paid_order(placed_order):
    apply_event(consumer="warehouse", event=order_paid_event(placed_order))
    apply_event(consumer="warehouse", event=order_paid_event(placed_order))  # another event id for the same order
    assert Shipment.objects.filter(order_id=placed_order.id).count() == 1
