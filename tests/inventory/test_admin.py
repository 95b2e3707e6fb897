"""inventory/admin/: stock managers adjust stock through the ledger, in bulk, from a
CSV file, and see the audit, without a stale form undoing what shoppers reserved."""

import io

import pytest

from inventory.models import Stock, StockMovement
from inventory.services import reserve_stock
from tests.factories import product_with_stock
from tests.helpers import adjust

pytestmark = pytest.mark.django_db


def available(sku):
    return Stock.objects.get(product_id=sku).available


def test_stale_form_receive_keeps_reservations_made_meanwhile(stock_manager):
    product_with_stock(sku="MUG", available=20)
    form = stock_manager.get("/admin/inventory/stock/MUG/change/")
    assert form.status_code == 200 and b'name="operation"' in form.content
    assert b'name="available"' not in form.content  # no stock figure is an input
    for _ in range(5):
        reserve_stock(lines={"MUG": 1})  # shoppers check out while the form is open
    response = adjust(stock_manager, "MUG", "receive", 10)
    assert response.status_code == 302
    stock = Stock.objects.get(product_id="MUG")
    assert (stock.available, stock.reserved) == (20 - 5 + 10, 5)
    movement = StockMovement.objects.latest("id")
    assert (movement.delta, movement.created_by) == (10, stock_manager.user)


def test_stale_form_set_to_n_gives_exactly_n_and_keeps_reservations(stock_manager):
    product_with_stock(sku="MUG", available=20)
    stock_manager.get("/admin/inventory/stock/MUG/change/")
    for _ in range(5):
        reserve_stock(lines={"MUG": 1})
    adjust(stock_manager, "MUG", "set", 8)
    stock = Stock.objects.get(product_id="MUG")
    assert (stock.available, stock.reserved) == (8, 5)
    from inventory.services import stock_audit

    assert stock_audit(skus=["MUG"])[0]["difference"] == 0


def test_write_off_below_zero_is_refused_with_a_message(stock_manager):
    product_with_stock(sku="MUG", available=3)
    response = adjust(stock_manager, "MUG", "write_off", 4)
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("Cannot write off" in m for m in messages)
    assert available("MUG") == 3
    adjust(stock_manager, "MUG", "write_off", 2)
    assert available("MUG") == 1


def test_bulk_receive_for_selected_skus(stock_manager):
    product_with_stock(sku="A", available=1)
    product_with_stock(sku="B", available=2)
    page = stock_manager.post("/admin/inventory/stock/", {"action": "bulk_receive", "_selected_action": ["A", "B"]})
    assert page.status_code == 200 and b"Receive stock" in page.content
    stock_manager.post(
        "/admin/inventory/stock/",
        {"action": "bulk_receive", "_selected_action": ["A", "B"], "quantity": 5, "note": "truck", "apply": "1"},
    )
    assert (available("A"), available("B")) == (6, 7)
    assert StockMovement.objects.filter(note="truck", created_by=stock_manager.user).count() == 2


def test_audit_page_shows_a_planted_difference_in_red(stock_manager):
    product_with_stock(sku="OK", available=4)
    product_with_stock(sku="BAD", available=4)
    Stock.objects.filter(product_id="BAD").update(available=3)  # a unit vanished outside the ledger
    response = stock_manager.get("/admin/inventory/stock/audit/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "1 SKU(s) do not add up" in body
    assert '<strong style="color:#ba2121">1</strong>' in body
    selected = stock_manager.post("/admin/inventory/stock/", {"action": "audit_selected", "_selected_action": ["OK"]})
    assert selected.status_code == 200 and "Every SKU adds up" in selected.content.decode()


def test_csv_import_from_the_admin_uses_the_catalog_loader(stock_manager):
    good = io.BytesIO(b"sku,name,price,stock\nNEW-1,New thing,1500,9\n")
    good.name = "catalog.csv"
    response = stock_manager.post("/admin/inventory/stock/import/", {"file": good})
    assert response.status_code == 302
    assert available("NEW-1") == 9
    bad = io.BytesIO(b"sku,name,price,stock\nNEW-2,Thing,-1,9\n")
    bad.name = "bad.csv"
    response = stock_manager.post("/admin/inventory/stock/import/", {"file": bad})
    assert response.status_code == 200 and b"line 2:" in response.content
    assert not Stock.objects.filter(product_id="NEW-2").exists()


def test_stock_change_list_shows_flags_and_filters(stock_manager, redis):
    product_with_stock(sku="LOW", available=2)
    product_with_stock(sku="PLENTY", available=500)
    response = stock_manager.get("/admin/inventory/stock/?low=yes")
    assert b"LOW" in response.content and b"PLENTY" not in response.content
    assert stock_manager.get("/admin/inventory/stock/?q=PLENTY").content.count(b"PLENTY") >= 1


def test_low_stock_filter_and_flag_follow_each_skus_threshold(stock_manager, redis, settings):
    settings.LOW_STOCK_THRESHOLD = 10
    product_with_stock(sku="BULKY", available=40)  # its own threshold, 100: low
    product_with_stock(sku="RARE", available=3)  # its own threshold, 2: enough
    product_with_stock(sku="PLAIN", available=5)  # the setting, 10: low
    Stock.objects.filter(product_id="BULKY").update(low_stock_threshold=100)
    Stock.objects.filter(product_id="RARE").update(low_stock_threshold=2)

    def listed(query):
        changelist = stock_manager.get(f"/admin/inventory/stock/{query}").context["cl"]
        return sorted(stock.product_id for stock in changelist.result_list)

    assert listed("?low=yes") == ["BULKY", "PLAIN"]
    assert listed("?low=no") == ["RARE"]
    page = stock_manager.get("/admin/inventory/stock/").content.decode()
    assert "LOW (below 100)" in page and "LOW (below 10)" in page and "LOW (below 2)" not in page


def change_form(**fields):
    """The change form as the browser submits it: nothing changed unless given."""
    return {
        "operation": "",
        "quantity": "",
        "note": "",
        "low_stock_threshold": "",
        "initial-low_stock_threshold": "",
        "_save": "Save",
        **fields,
    }


def test_staff_set_and_clear_a_skus_low_stock_threshold_in_the_change_form(stock_manager, settings):
    settings.LOW_STOCK_THRESHOLD = 10
    product_with_stock(sku="MUG", available=20)
    form = stock_manager.get("/admin/inventory/stock/MUG/change/").content.decode()
    assert 'name="low_stock_threshold"' in form and 'name="initial-low_stock_threshold"' in form
    assert "Blank: the default, the LOW_STOCK_THRESHOLD setting. The setting is 10." in form
    movements = StockMovement.objects.count()
    reserve_stock(lines={"MUG": 1})  # a shopper checks out while the form is open
    response = stock_manager.post("/admin/inventory/stock/MUG/change/", change_form(low_stock_threshold="25"))
    assert response.status_code == 302
    stock = Stock.objects.get(product_id="MUG")
    assert (stock.low_stock_threshold, stock.available, stock.reserved) == (25, 19, 1)
    assert StockMovement.objects.count() == movements  # a threshold is not a stock movement
    assert list(Stock.objects.low().values_list("product_id", flat=True)) == ["MUG"]  # 19 < 25; not below 10
    stock_manager.post(
        "/admin/inventory/stock/MUG/change/",
        change_form(low_stock_threshold="", **{"initial-low_stock_threshold": "25"}),
    )
    assert Stock.objects.get(product_id="MUG").low_stock_threshold is None  # blank: the setting again


def test_stale_form_leaves_a_threshold_set_meanwhile_and_a_refused_adjustment_saves_nothing(stock_manager):
    product_with_stock(sku="MUG", available=3)
    stock_manager.get("/admin/inventory/stock/MUG/change/")  # opened with no threshold of its own
    Stock.objects.filter(product_id="MUG").update(low_stock_threshold=7)  # another user sets one meanwhile
    stock_manager.post("/admin/inventory/stock/MUG/change/", change_form(operation="receive", quantity="2"))
    stock = Stock.objects.get(product_id="MUG")
    assert (stock.available, stock.low_stock_threshold) == (5, 7)
    response = stock_manager.post(
        "/admin/inventory/stock/MUG/change/",
        change_form(
            operation="write_off", quantity="9", low_stock_threshold="1", **{"initial-low_stock_threshold": "7"}
        ),
    )
    assert any("Cannot write off" in str(m) for m in response.wsgi_request._messages)
    stock = Stock.objects.get(product_id="MUG")
    assert (stock.available, stock.low_stock_threshold) == (5, 7)


def test_two_staff_adjusting_at_once_each_get_their_own_message(stock_manager, order_manager):
    """The ModelAdmin instance is shared by every thread of a worker: interleave two
    requests as two threads would, and each must still see its own outcome."""
    from types import SimpleNamespace

    from django.contrib import admin as django_admin
    from django.contrib.messages import get_messages
    from django.contrib.messages.storage.fallback import FallbackStorage
    from django.test import RequestFactory

    product_with_stock(sku="A", available=1)
    product_with_stock(sku="B", available=5)
    model_admin = django_admin.site._registry[Stock]

    def request():
        made = RequestFactory().post("/admin/inventory/stock/x/change/", {"_save": "Save"})
        made.user, made.session = stock_manager.user, {}
        made._messages = FallbackStorage(made)
        return made

    def form(operation, quantity):
        return SimpleNamespace(cleaned_data={"operation": operation, "quantity": quantity, "note": ""}, changed_data=[])

    first, second = request(), request()
    stock_a, stock_b = Stock.objects.get(product_id="A"), Stock.objects.get(product_id="B")
    model_admin.save_model(first, stock_a, form("write_off", 5), True)  # refused: only 1 available
    model_admin.save_model(second, stock_b, form("receive", 1), True)  # fine
    model_admin.response_change(first, stock_a)
    model_admin.response_change(second, stock_b)
    [first_message] = [str(m) for m in get_messages(first)]
    [second_message] = [str(m) for m in get_messages(second)]
    assert "Cannot write off" in first_message
    assert second_message == "B: now 6 available, 0 reserved."


def test_flash_sale_admin_lists_the_sale_price_as_money_and_asks_for_minor_units(
    stock_manager, django_capture_on_commit_callbacks
):
    from inventory.services.flash_sales import seed_flash_sale

    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="HOT", stock=5, price=1000, sale_price=700)
        seed_flash_sale(sku="WARM", stock=5, price=1250)
    listing = stock_manager.get("/admin/inventory/flashsale/").content.decode()
    assert '<td class="field-price">€7.00</td>' in listing
    assert '<td class="field-price">catalog price (€12.50)</td>' in listing
    form = stock_manager.get("/admin/inventory/flashsale/HOT/change/").content.decode()
    assert 'name="sale_price" value="700"' in form and "in minor units (cents): 1299 = €12.99." in form
    upload = stock_manager.get("/admin/inventory/stock/import/").content.decode()
    assert "price in minor units (cents): 1299 = €12.99" in upload


def test_a_flash_sale_page_that_only_shows_it_shows_its_price_as_money(django_capture_on_commit_callbacks):
    from django.contrib.auth.models import Permission

    from inventory.services.flash_sales import seed_flash_sale
    from tests.helpers import staff_client

    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="HOT", stock=5, price=1000, sale_price=700)
    viewer = staff_client()
    viewer.user.user_permissions.add(Permission.objects.get(codename="view_flashsale"))
    page = viewer.get("/admin/inventory/flashsale/HOT/change/").content.decode()
    assert page.count('<div class="readonly">€7.00</div>') == 1 and ">700<" not in page


def test_a_staff_user_who_may_only_view_stock_sees_the_change_page(order_manager, settings):
    settings.LOW_STOCK_THRESHOLD = 10
    product_with_stock(sku="MUG", available=20)
    Stock.objects.filter(product_id="MUG").update(low_stock_threshold=4)
    page = order_manager.get("/admin/inventory/stock/MUG/change/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="operation"' not in body and 'name="low_stock_threshold"' not in body  # nothing to change
    assert '<div class="readonly">20</div>' in body and '<div class="readonly">4</div>' in body
    refused = order_manager.post("/admin/inventory/stock/MUG/change/", change_form(operation="receive", quantity="5"))
    assert refused.status_code == 403 and available("MUG") == 20
