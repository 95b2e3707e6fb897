"""inventory/services/flash_sales.py and its commands: a sale is opened (seeded), its
gate counter synced from the database when lost, and ended."""

import pytest
from django.core.management import call_command

from inventory import gate
from inventory.models import FlashSale, Stock
from inventory.services.flash_sales import gated_skus
from tests.helpers import checkout, fill_cart, shopper_client
from tests.inventory.conftest import counter, seed

pytestmark = pytest.mark.django_db


def test_seed_flash_sale_sets_database_and_gate(capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_flash_sale", "HOT", "--stock", "7", "--price", "49999", "--per-customer-limit", "2")
    stock = Stock.objects.get(product_id="HOT")
    assert (stock.available, stock.reserved) == (7, 0)
    assert counter() == 7
    assert FlashSale.objects.get().per_customer_limit == 2
    assert "7 units" in capsys.readouterr().out
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_flash_sale", "HOT", "--stock", "3")  # re-seed: exactly 3, through the ledger
    assert Stock.objects.get(product_id="HOT").available == 3 and counter() == 3
    from inventory.services import stock_audit

    assert stock_audit(skus=["HOT"])[0]["difference"] == 0


def test_lost_counter_fails_closed_until_synced(redis, capsys):
    seed(stock=5)
    gate.connection().delete(gate.remaining_key("HOT"))  # Redis restarted without persistence
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper, key="k1").status_code == 503
    call_command("flash_sale_sync", "HOT")
    assert counter() == 5
    assert checkout(shopper, key="k2").status_code == 201
    call_command("flash_sale_status")
    out = capsys.readouterr().out
    assert "HOT" in out and "gate counter set to 5" in out


def test_end_flash_sale_removes_the_gate(redis, django_capture_on_commit_callbacks):
    seed(stock=5)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("end_flash_sale", "HOT")
    assert not FlashSale.objects.exists()
    assert gate.connection().get(gate.remaining_key("HOT")) is None
    assert gated_skus() == {}
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"HOT": 1})
    assert checkout(shopper).status_code == 201  # straight to the database
