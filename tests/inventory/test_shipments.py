"""inventory/services/shipments.py: an order's units leave the warehouse through
the inventory app, which alone writes its tables; the orders app tells it."""

import pytest
from django.utils import timezone

from inventory.models import Shipment, Stock
from inventory.services import reserve_stock, ship_order
from tests.factories import product_with_stock
from tests.inventory.test_stock_writers import _modules, stock_writes

pytestmark = pytest.mark.django_db

INVENTORY_MODELS = frozenset({"Stock", "StockMovement", "Shipment", "LowStockAlert", "FlashSale"})


def test_ship_order_moves_the_units_and_marks_the_shipment():
    product_with_stock(sku="A", available=5)
    product_with_stock(sku="B", available=5)
    reserve_stock(lines={"A": 2, "B": 1})
    Shipment.objects.create(order_id=7, items=[{"sku": "A", "quantity": 2}, {"sku": "B", "quantity": 1}])
    at = timezone.now()
    items = ship_order(order_id=7, lines={"B": 1, "A": 2}, shipping_address={"city": "Madrid"}, shipped_at=at)
    assert items == [{"sku": "A", "quantity": 2}, {"sku": "B", "quantity": 1}]
    assert dict(Stock.objects.values_list("product_id", "shipped")) == {"A": 2, "B": 1}
    shipment = Shipment.objects.get(order_id=7)
    assert (shipment.status, shipment.shipped_at, shipment.items) == (Shipment.Status.SHIPPED, at, items)
    assert shipment.shipping_address is None  # the request's, as its OrderPaid gave it: not replaced


def test_ship_order_before_the_warehouse_heard_of_the_order_makes_its_shipment():
    product_with_stock(sku="A", available=5)
    reserve_stock(lines={"A": 1})
    ship_order(order_id=8, lines={"A": 1}, shipping_address={"city": "Paris"}, shipped_at=timezone.now())
    shipment = Shipment.objects.get(order_id=8)
    assert (shipment.status, shipment.shipping_address) == (Shipment.Status.SHIPPED, {"city": "Paris"})


def test_only_the_inventory_app_writes_its_tables():
    offenders = [
        f"{module} {where}"
        for module, source in _modules(allowed="inventory/")
        for where in stock_writes(source, INVENTORY_MODELS)
    ]
    assert offenders == []


def test_the_check_catches_a_shipment_written_elsewhere():
    assert stock_writes("Shipment.objects.update_or_create(order_id=1, defaults={})", INVENTORY_MODELS)
    assert stock_writes("Shipment(order_id=1, items=[]).save()", INVENTORY_MODELS)
