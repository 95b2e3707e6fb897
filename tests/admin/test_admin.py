import io

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.utils import timezone

from inventory.models import Stock, StockMovement
from inventory.services import receive_stock, reserve_stock
from orders.models import Order, OrderStatus, Refund
from outbox.models import OutboxEvent
from tests.factories import ProductFactory, UserFactory, product_with_stock
from tests.orders.conftest import place_pending_order, post_webhook

pytestmark = pytest.mark.django_db
PASSWORD = "correct-horse-battery"


def staff_client(group: str | None = None, superuser: bool = False) -> Client:
    user = UserFactory(is_staff=True, is_superuser=superuser)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def stock_manager():
    return staff_client("Stock managers")


@pytest.fixture
def order_manager():
    return staff_client("Order managers")


def adjust(client, sku, operation, quantity, note=""):
    return client.post(
        f"/admin/inventory/stock/{sku}/change/",
        {"operation": operation, "quantity": quantity, "note": note, "_save": "Save"},
    )


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
    page = stock_manager.post(
        "/admin/inventory/stock/", {"action": "bulk_receive", "_selected_action": ["A", "B"]}
    )
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


def test_order_actions_report_per_order_and_skip_wrong_states(order_manager, redis):
    product_with_stock(sku="A", price=100, available=10)
    pending = place_pending_order(redis, UserFactory(), {"A": 1})
    paid = place_pending_order(redis, UserFactory(), {"A": 2})
    to_ship = place_pending_order(redis, UserFactory(), {"A": 3})
    post_webhook(Client(), payment_id="p-paid", order_id=paid.id, amount=200)
    post_webhook(Client(), payment_id="p-ship", order_id=to_ship.id, amount=300)

    def act(action, *orders):
        response = order_manager.post(
            "/admin/orders/order/", {"action": action, "_selected_action": [o.id for o in orders]}, follow=True
        )
        return [str(m) for m in response.context["messages"]]

    messages = act("cancel_pending", pending, paid)
    assert f"Order {pending.id}: cancelled, stock returned." in messages
    assert f"Order {paid.id}: skipped, it is PAID." in messages
    assert act("refund_paid", paid) == [f"Order {paid.id}: refund requested, stock returned."]
    assert Refund.objects.get(order=paid).reason == "staff"
    assert act("mark_shipped", to_ship) == [f"Order {to_ship.id}: shipped."]
    statuses = dict(Order.objects.values_list("id", "status"))
    assert statuses == {pending.id: "CANCELLED", paid.id: "REFUNDED", to_ship.id: "SHIPPED"}
    stock = Stock.objects.get(product_id="A")
    assert (stock.available, stock.reserved, stock.shipped) == (7, 0, 3)
    assert OutboxEvent.objects.filter(event_type="OrderShipped").count() == 1
    detail = order_manager.get(f"/admin/orders/order/{to_ship.id}/change/")
    body = detail.content.decode()
    assert "OrderCreated" in body and "OrderPaid" in body and "p-ship" in body and "SHIPPED" in body
    assert 'name="status"' not in body and 'name="total_amount"' not in body  # read-only


def test_order_search_by_username_and_sku(order_manager, redis):
    product_with_stock(sku="FINDME", available=5)
    product_with_stock(sku="OTHER", available=5)
    order = place_pending_order(redis, UserFactory(username="ada"), {"FINDME": 1})
    place_pending_order(redis, UserFactory(username="bob"), {"OTHER": 1})
    for query in ("ada", "FINDME", str(order.id)):
        response = order_manager.get(f"/admin/orders/order/?q={query}")
        assert response.context["cl"].result_count == 1, query


def test_outbox_admin_retry_and_index_counts():
    admin = staff_client(superuser=True)
    from django.db import transaction

    from outbox.services import record_event

    with transaction.atomic():
        record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
    index = admin.get("/admin/")
    assert index.context["outbox_waiting"] == 1
    assert b'id="outbox-waiting">1<' in index.content
    event = OutboxEvent.objects.get()
    response = admin.post(
        "/admin/outbox/outboxevent/", {"action": "retry_now", "_selected_action": [event.id]}, follow=True
    )
    assert response.status_code == 200
    assert OutboxEvent.objects.get().last_error == "retry requested by staff"


def test_outbox_admin_filters_by_the_relay_queue_and_retries_only_waiting_events():
    admin = staff_client(superuser=True)
    from django.db import transaction

    from outbox.relay import mark_published
    from outbox.services import record_event

    with transaction.atomic():
        waiting = record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
        published = record_event(aggregate_type="order", aggregate_id=2, event_type="X", data={})
    mark_published([published])
    for value, expected in (("no", [waiting]), ("yes", [published])):
        response = admin.get(f"/admin/outbox/outboxevent/?published={value}")
        assert [event.id for event in response.context["cl"].result_list] == expected
    admin.post("/admin/outbox/outboxevent/", {"action": "retry_now", "_selected_action": [waiting, published]})
    assert dict(OutboxEvent.objects.values_list("id", "last_error")) == {
        waiting: "retry requested by staff",
        published: "",
    }


def test_permissions_per_group(stock_manager, order_manager, redis):
    product_with_stock(sku="A", available=5)
    assert stock_manager.get("/admin/orders/order/").status_code == 403
    assert stock_manager.get("/admin/shop/product/").status_code == 200
    assert adjust(stock_manager, "A", "receive", 1).status_code == 302

    assert order_manager.get("/admin/orders/order/").status_code == 200
    assert order_manager.get("/admin/inventory/stock/").status_code == 200  # read-only stock
    assert adjust(order_manager, "A", "receive", 1).status_code == 403
    assert order_manager.get("/admin/inventory/stock/import/").status_code == 403
    assert order_manager.get("/admin/shop/product/").status_code == 403
    assert available("A") == 6

    shopper = Client()
    shopper.force_login(UserFactory())
    response = shopper.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@pytest.mark.slow
def test_change_lists_stay_under_20_queries_at_scale(django_assert_max_num_queries):
    """100,000 orders and 10,000 SKUs, written in bulk with generate_series."""
    admin = staff_client(superuser=True)
    customer = UserFactory()
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO shop_product (sku, name, price, is_active, created_at, updated_at) "
            "SELECT 'S-' || g, 'Product ' || g, 100 + g, true, %s, %s FROM generate_series(1, 10000) g",
            [now, now],
        )
        cursor.execute(
            "INSERT INTO inventory (sku, available, reserved, shipped) SELECT sku, 50, 0, 0 FROM shop_product"
        )
        cursor.execute(
            "INSERT INTO orders (customer_id, idempotency_key, request_hash, status, total_amount, currency, "
            "expires_at, created_at) SELECT %s, 'k' || g, 'h', %s, 1000, 'EUR', %s, %s "
            "FROM generate_series(1, 100000) g",
            [customer.id, OrderStatus.PENDING_PAYMENT, now, now],
        )
    receive_stock(sku="S-1", quantity=1)
    for url in ("/admin/orders/order/", "/admin/inventory/stock/", "/admin/orders/order/?status__exact=PENDING_PAYMENT",
                "/admin/inventory/stock/?low=no", "/admin/shop/product/"):
        with django_assert_max_num_queries(20):
            assert admin.get(url).status_code == 200, url
    assert ProductFactory._meta.model.objects.count() == 10000


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
        return SimpleNamespace(cleaned_data={"operation": operation, "quantity": quantity, "note": ""})

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
