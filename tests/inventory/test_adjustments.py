"""inventory/services/adjustments.py: what staff change by hand is all or nothing."""

import pytest

from inventory.exceptions import StockLimitExceeded, WriteOffBelowZero
from inventory.models import MAX_UNITS, Stock, StockMovement
from inventory.services import adjust_stock, receive_stock_bulk
from tests.factories import product_with_stock

pytestmark = pytest.mark.django_db


def test_receive_stock_bulk_receives_for_every_sku_or_none():
    product_with_stock(sku="A", available=1)
    product_with_stock(sku="B", available=MAX_UNITS - 2)
    product_with_stock(sku="C", available=3)
    with pytest.raises(StockLimitExceeded) as refused:
        receive_stock_bulk(skus=["C", "B", "A"], quantity=5, note="truck")
    assert refused.value.details["sku"] == "B"
    assert dict(Stock.objects.values_list("product_id", "available")) == {"A": 1, "B": MAX_UNITS - 2, "C": 3}
    assert not StockMovement.objects.filter(note="truck").exists()
    assert receive_stock_bulk(skus=["C", "A"], quantity=5, note="truck") == 2
    assert dict(Stock.objects.filter(product_id__in=["A", "C"]).values_list("product_id", "available")) == {
        "A": 6,
        "C": 8,
    }


def test_a_refused_adjustment_leaves_the_threshold_too():
    product_with_stock(sku="MUG", available=3)
    with pytest.raises(WriteOffBelowZero):
        adjust_stock(sku="MUG", operation="write_off", quantity=4, threshold=9)
    assert Stock.objects.filter(product_id="MUG").values_list("available", "low_stock_threshold").get() == (3, None)
    adjust_stock(sku="MUG", operation="set", quantity=10, threshold=9)
    assert Stock.objects.filter(product_id="MUG").values_list("available", "low_stock_threshold").get() == (10, 9)
    adjust_stock(sku="MUG", operation=None, threshold=None)  # the threshold alone, back to the setting
    assert Stock.objects.filter(product_id="MUG").values_list("available", "low_stock_threshold").get() == (10, None)
    with pytest.raises(ValueError):
        adjust_stock(sku="MUG", operation="steal", quantity=1)
