"""orders/admin/: the order admin's actions, detail page and search."""

import pytest
from django.test import Client

from inventory.models import Stock
from orders.models import Order, Refund
from outbox.models import OutboxEvent
from tests.factories import (
    OrderFactory,
    OrderItemFactory,
    PaymentFactory,
    ProductFactory,
    UserFactory,
    product_with_stock,
)
from tests.helpers import place_pending_order, post_webhook

pytestmark = pytest.mark.django_db


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


def test_every_admin_action_declares_the_permission_it_needs():
    from django.contrib import admin

    undeclared = []
    for model, model_admin in admin.site._registry.items():
        for name in model_admin.actions or []:
            action = getattr(model_admin, name) if isinstance(name, str) else name
            if not getattr(action, "allowed_permissions", None):
                undeclared.append(f"{model._meta.label}.{getattr(action, '__name__', name)}")
    assert not undeclared, f"admin actions any viewer could run: {undeclared}"


def test_a_viewer_of_orders_can_neither_act_on_them_nor_export_them(redis):
    from django.contrib.auth.models import Permission

    product_with_stock(sku="A", price=100, available=10)
    pending = place_pending_order(redis, UserFactory(), {"A": 1})
    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_order"))
    client = Client()
    client.force_login(viewer)

    listing = client.get("/admin/orders/order/")
    assert listing.status_code == 200 and "cancel_pending" not in listing.content.decode()
    for action in ("cancel_pending", "refund_paid", "mark_shipped", "export_csv"):
        response = client.post("/admin/orders/order/", {"action": action, "_selected_action": [pending.id]})
        assert response.status_code in (200, 302) and response.get("Content-Type", "").startswith("text/html")
    assert Order.objects.get(id=pending.id).status == "PENDING_PAYMENT"


def test_order_managers_export_and_an_orders_snapshot_is_read_only(order_manager, redis):
    product_with_stock(sku="A", price=100, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 1})
    exported = order_manager.post("/admin/orders/order/", {"action": "export_csv", "_selected_action": [order.id]})
    assert exported["Content-Type"].startswith("text/csv")

    form = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert 'name="shipping_address"' not in form and 'name="total_amount"' not in form
    order_manager.post(
        f"/admin/orders/order/{order.id}/change/", {"shipping_address": '{"country": 123}', "total_amount": "1"}
    )
    order.refresh_from_db()
    assert order.shipping_address["country"] == "ES" and order.total_amount == 100


def test_the_order_page_shows_money_as_money_and_the_address_as_lines(order_manager):
    order = OrderFactory(total_amount=123456789, currency="EUR")
    OrderItemFactory(order=order, product=ProductFactory(sku="MUG"), quantity=3, unit_price=1299, discount=300)
    PaymentFactory(order=order, provider_payment_id="pay_big", amount=123456789, currency="EUR")
    page = order_manager.get(f"/admin/orders/order/{order.id}/change/").content.decode()
    assert '<div class="readonly">€1,234,567.89</div>' in page  # the total
    assert "€12.99" in page and "€3.00" in page and "€35.97" in page  # unit price, discount, line total
    assert ">1299<" not in page and "123456789" not in page and 'name="shipping_address"' not in page
    lines = ["Ana García", "Calle Mayor 1", "28013 Madrid", "ES", "+34 600 000 000"]  # line2 is blank: left out
    assert "\n".join(f"<div>{line}</div>" for line in lines) in page

    listing = order_manager.get("/admin/orders/order/").content.decode()
    assert '<td class="field-total">€1,234,567.89</td>' in listing


def test_payments_and_refunds_show_their_amount_as_money(order_manager):
    payment = PaymentFactory(order=OrderFactory(total_amount=2500), provider_payment_id="pay_money", amount=2500)
    refund = Refund.objects.create(payment=payment, order=payment.order, amount=2500, currency="GBP", reason="staff")
    payments = order_manager.get("/admin/orders/payment/").content.decode()
    assert '<td class="field-amount_shown">€25.00</td>' in payments
    payment_page = order_manager.get(f"/admin/orders/payment/{payment.id}/change/").content.decode()
    assert '<div class="readonly">€25.00</div>' in payment_page and ">2500<" not in payment_page
    refunds = order_manager.get("/admin/orders/refund/").content.decode()
    assert '<td class="field-amount_shown">£25.00</td>' in refunds
    refund_page = order_manager.get(f"/admin/orders/refund/{refund.id}/change/").content.decode()
    assert '<div class="readonly">£25.00</div>' in refund_page and 'name="amount"' not in refund_page
