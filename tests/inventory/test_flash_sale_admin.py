"""Stock managers schedule, edit and end flash sales in the admin, through the
same services as the commands (the gate is set with the database), and watch
the window on the live page."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from config.dashboard import sale_window
from inventory import gate
from inventory.models import FlashSale, Stock
from tests.factories import product_with_stock
from tests.inventory.conftest import counter

pytestmark = pytest.mark.django_db


def sale_form(sku: str, *, stock="", limit="", mode="direct", starts: datetime, ends: datetime | None = None) -> dict:
    def split(name, moment):
        return (
            {f"{name}_0": f"{moment:%Y-%m-%d}", f"{name}_1": f"{moment:%H:%M:%S}"}
            if moment
            else {f"{name}_0": "", f"{name}_1": ""}
        )

    return {
        "product": sku,
        "stock": stock,
        "per_customer_limit": limit,
        "mode": mode,
        **split("starts_at", starts),
        **split("ends_at", ends),
    }


@pytest.fixture
def manager():
    from tests.helpers import staff_client

    return staff_client("Stock managers")


def test_a_stock_manager_schedules_a_sale_and_the_gate_is_set(manager, django_capture_on_commit_callbacks):
    product_with_stock(sku="HOT", available=3)
    starts = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        response = manager.post(
            "/admin/inventory/flashsale/add/",
            sale_form("HOT", stock=7, limit=2, starts=starts, ends=starts + timedelta(hours=2)),
        )
    assert response.status_code == 302, response.content.decode()[-2000:]
    sale = FlashSale.objects.get()
    assert (sale.per_customer_limit, sale.starts_at, sale.ends_at) == (2, starts, starts + timedelta(hours=2))
    assert Stock.objects.get(product_id="HOT").available == 7 and counter() == 7  # through the ledger, and the gate
    listing = manager.get("/admin/inventory/flashsale/")
    assert b"scheduled" in listing.content


def test_a_sale_is_opened_with_its_units_and_ends_after_it_starts(manager):
    product_with_stock(sku="HOT", available=3)
    now = timezone.now().replace(microsecond=0)
    no_units = manager.post("/admin/inventory/flashsale/add/", sale_form("HOT", starts=now))
    backwards = manager.post(
        "/admin/inventory/flashsale/add/", sale_form("HOT", stock=5, starts=now, ends=now - timedelta(minutes=1))
    )
    assert no_units.status_code == backwards.status_code == 200  # the form again, with its errors
    assert b"Give the units the sale opens with." in no_units.content
    assert b"A sale ends after it starts." in backwards.content
    assert not FlashSale.objects.exists() and gate.connection().get(gate.remaining_key("HOT")) is None


def test_editing_the_rule_keeps_the_units_and_giving_units_reseeds(manager, django_capture_on_commit_callbacks):
    product_with_stock(sku="HOT", available=3)
    now = timezone.now().replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        manager.post("/admin/inventory/flashsale/add/", sale_form("HOT", stock=5, starts=now))
    gate.connection().decrby(gate.remaining_key("HOT"), 2)  # two units admitted meanwhile
    later = now + timedelta(days=1)
    edited = manager.post(
        "/admin/inventory/flashsale/HOT/change/", sale_form("HOT", limit=1, mode="queue", starts=now, ends=later)
    )
    assert edited.status_code == 302
    sale = FlashSale.objects.get()
    assert (sale.per_customer_limit, sale.mode, sale.ends_at) == (1, "queue", later) and counter() == 3
    with django_capture_on_commit_callbacks(execute=True):
        manager.post("/admin/inventory/flashsale/HOT/change/", sale_form("HOT", stock=9, starts=now, ends=later))
    assert counter() == 9 and Stock.objects.get(product_id="HOT").available == 9


def test_ending_sales_from_the_admin_removes_their_gates(manager, django_capture_on_commit_callbacks):
    for sku in ("HOT", "WARM"):
        product_with_stock(sku=sku, available=1)
        with django_capture_on_commit_callbacks(execute=True):
            manager.post("/admin/inventory/flashsale/add/", sale_form(sku, stock=4, starts=timezone.now()))
    with django_capture_on_commit_callbacks(execute=True):
        response = manager.post(
            "/admin/inventory/flashsale/", {"action": "end_sales", "_selected_action": ["HOT", "WARM"]}
        )
    assert response.status_code == 302
    assert not FlashSale.objects.exists()
    assert gate.connection().get(gate.remaining_key("HOT")) is None
    assert gate.connection().get(gate.remaining_key("WARM")) is None


def test_the_live_page_shows_the_window_as_a_countdown(manager, django_capture_on_commit_callbacks):
    product_with_stock(sku="HOT", available=1)
    with django_capture_on_commit_callbacks(execute=True):
        manager.post(
            "/admin/inventory/flashsale/add/", sale_form("HOT", stock=4, starts=timezone.now() + timedelta(minutes=90))
        )
    live = manager.get("/admin/flash-sales/HOT/live.json").json()
    assert live["window"].startswith("opens in 1 h 29 min") and live["ends_at"] is None


def test_sale_window_phrases():
    at = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    assert sale_window(at + timedelta(seconds=75), None, at) == "opens in 1 min 15 s"
    assert sale_window(at, None, at) == "open, no end"
    assert sale_window(at - timedelta(hours=1), at + timedelta(days=2, hours=3), at) == "open, ends in 2 d 3 h"
    assert sale_window(at - timedelta(hours=2), at - timedelta(seconds=5), at) == "ended 5 s ago"


def test_a_form_opened_before_a_mode_switch_does_not_switch_it_back(manager, django_capture_on_commit_callbacks):
    """Only what the form changed is written: the operator's switch to queue mode,
    made while a colleague's form was open, stays when the colleague saves an end."""
    from django.core.management import call_command

    product_with_stock(sku="HOT", available=1)
    now = timezone.now().replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        manager.post("/admin/inventory/flashsale/add/", sale_form("HOT", stock=5, starts=now))
    opened = sale_form("HOT", starts=now)  # the form as the colleague opened it: direct mode, no end
    initial = {f"initial-{key}": value for key, value in opened.items() if key not in ("product", "stock")}
    call_command("flash_sale_mode", "HOT", "queue")
    later = now + timedelta(hours=3)
    saved = manager.post(
        "/admin/inventory/flashsale/HOT/change/", {**sale_form("HOT", starts=now, ends=later), **initial}
    )
    assert saved.status_code == 302
    sale = FlashSale.objects.get()
    assert (sale.mode, sale.ends_at) == ("queue", later)


def test_reseeding_a_scheduled_sale_keeps_its_window(django_capture_on_commit_callbacks):
    from django.core.management import call_command

    opens = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "seed_flash_sale",
            "HOT",
            "--stock",
            "5",
            "--price",
            "999",
            "--starts-at",
            opens.isoformat(),
            "--ends-at",
            (opens + timedelta(hours=2)).isoformat(),
        )
        call_command("seed_flash_sale", "HOT", "--stock", "500")  # topped up
    sale = FlashSale.objects.get()
    assert (sale.starts_at, sale.ends_at) == (opens, opens + timedelta(hours=2)) and counter() == 500


def test_a_flash_sales_price_is_edited_with_the_sale_not_as_a_promotion(django_capture_on_commit_callbacks):
    from inventory.services.flash_sales import seed_flash_sale
    from tests.helpers import staff_client

    with django_capture_on_commit_callbacks(execute=True):
        sale = seed_flash_sale(sku="HOT", stock=5, price=1000, sale_price=700)
    admin = staff_client(superuser=True)
    url = f"/admin/shop/promotion/{sale.promotion_id}/"
    page = admin.get(url + "change/")
    assert page.status_code == 200 and b'name="value"' not in page.content  # shown, not editable
    assert admin.post(url + "delete/", {"post": "yes"}).status_code == 403
    assert FlashSale.objects.get().promotion_id == sale.promotion_id
