"""inventory/services/shipments.py: an order's units leave the warehouse through
the inventory app, which alone writes its tables; the orders app tells it."""

import ast
from pathlib import Path

import pytest
from django.utils import timezone

from inventory.models import Shipment, Stock
from inventory.services import reserve_stock, ship_order
from tests.factories import product_with_stock
from tests.inventory.test_stock_writers import WRITES, _root_name

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
INVENTORY_MODELS = {"Stock", "StockMovement", "Shipment", "LowStockAlert", "FlashSale"}


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


def inventory_writes(source: str) -> list[str]:
    """Where `source` writes one of inventory's tables: 'line N: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in INVENTORY_MODELS:
            found.append(f"line {node.lineno}: {node.func.id}(...)")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            if (model := _root_name(node.func.value)) in INVENTORY_MODELS:
                found.append(f"line {node.lineno}: {model}....{node.func.attr}()")
    return found


def test_only_the_inventory_app_writes_its_tables():
    offenders = [
        f"{path.relative_to(ROOT)} {where}"
        for app in ["config", "orders", "cart", "shop", "outbox", "core"]
        for path in sorted((ROOT / app).rglob("*.py"))
        if "migrations" not in path.parts
        for where in inventory_writes(path.read_text())
    ]
    assert offenders == []


def test_the_check_catches_a_shipment_written_elsewhere():
    assert inventory_writes("Shipment.objects.update_or_create(order_id=1, defaults={})")
    assert inventory_writes("Shipment(order_id=1, items=[]).save()")
    assert inventory_writes("Shipment.objects.filter(order_id=1).first()") == []
