"""inventory/services/stock.py: stock received, written off and set through the ledger,
and the audit that finds what changed outside it."""

import pytest

from inventory.exceptions import WriteOffBelowZero
from inventory.models import Stock, StockMovement
from inventory.services import receive_stock, set_available_stock, stock_audit, write_off_stock
from tests.factories import ProductFactory

pytestmark = pytest.mark.django_db


def test_receive_and_write_off_keep_the_ledger_and_stock_in_step():
    product = ProductFactory()
    receive_stock(sku=product.sku, quantity=10)
    write_off_stock(sku=product.sku, quantity=3)
    assert Stock.objects.get(product=product).available == 7
    assert sorted(StockMovement.objects.values_list("delta", flat=True)) == [-3, 10]
    assert stock_audit()[0]["difference"] == 0


def test_write_off_below_zero_is_refused_and_writes_nothing():
    product = ProductFactory()
    receive_stock(sku=product.sku, quantity=2)
    with pytest.raises(WriteOffBelowZero):
        write_off_stock(sku=product.sku, quantity=3)
    assert Stock.objects.get(product=product).available == 2
    assert StockMovement.objects.count() == 1


def test_set_available_applies_a_delta_and_keeps_reservations():
    product = ProductFactory()
    receive_stock(sku=product.sku, quantity=10)
    Stock.objects.filter(product=product).update(available=6, reserved=4)
    set_available_stock(sku=product.sku, available=20)
    stock = Stock.objects.get(product=product)
    assert (stock.available, stock.reserved) == (20, 4)
    assert stock_audit()[0]["difference"] == 0


def test_stock_audit_reports_a_planted_difference():
    product = ProductFactory()
    receive_stock(sku=product.sku, quantity=5)
    Stock.objects.filter(product=product).update(available=4)  # a unit vanished outside the ledger
    [row] = stock_audit()
    assert row["difference"] == 1


def test_stock_audit_command_fails_on_a_difference(capsys):
    from django.core.management import CommandError, call_command

    product = ProductFactory(sku="AUD")
    receive_stock(sku=product.sku, quantity=5)
    call_command("stock_audit")
    assert "1 SKU(s) audited, 0 with a difference" in capsys.readouterr().out
    Stock.objects.filter(product=product).update(available=7)
    with pytest.raises(CommandError):
        call_command("stock_audit")
    assert "AUD: ledger 5 != on hand 7" in capsys.readouterr().out
