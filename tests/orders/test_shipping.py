"""Where an order goes: the shipping address at checkout (sent or saved),
snapshotted on the order and carried to the warehouse; the order's dates, its
refund, the status filter and the shipped email."""

import pytest
from django.core import mail

from inventory.models import Shipment, Stock
from orders.models import Notification, Order, OrderStatus
from orders.services import mark_order_shipped, refund_paid_order
from outbox.consumers import apply_event
from outbox.models import OutboxEvent
from shop.models import Address
from tests.factories import SHIPPING_ADDRESS, ShopperWithoutAddressFactory, product_with_stock
from tests.helpers import consumer_event, fill_cart, post_webhook, shopper_client

pytestmark = pytest.mark.django_db

ELSEWHERE = {
    **SHIPPING_ADDRESS,
    "name": "Luis",
    "line1": "Rue de Rivoli 2",
    "city": "Paris",
    "country": "FR",
    "postal_code": "75001",
}


def checkout(client, key="k-1", **body):
    return client.post("/api/orders", body or None, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.fixture
def shopper(redis):
    product_with_stock(sku="A", price=500, available=10)
    client = shopper_client()
    fill_cart(redis, client.user.id, {"A": 1})
    return client


def test_the_saved_address_is_snapshotted_on_the_order(shopper):
    response = checkout(shopper)
    assert response.status_code == 201
    saved = Address.objects.filter(customer=shopper.user).values(*SHIPPING_ADDRESS).get()
    assert response.json()["shipping_address"] == saved
    Address.objects.filter(customer=shopper.user).update(city="Bilbao")  # an edit later
    order = shopper.get(f"/api/orders/{response.json()['id']}").json()
    assert order["shipping_address"]["city"] == "Madrid"
    [event] = OutboxEvent.objects.filter(event_type="OrderCreated")
    assert event.payload["shipping_address"] == saved


def test_an_address_sent_with_the_checkout_wins(shopper):
    response = checkout(shopper, shipping_address=ELSEWHERE)
    assert response.status_code == 201 and response.json()["shipping_address"] == ELSEWHERE
    assert Order.objects.get().shipping_address == ELSEWHERE


def test_no_address_at_all_is_a_422_that_holds_nothing(redis):
    product_with_stock(sku="A", price=500, available=10)
    client = shopper_client(ShopperWithoutAddressFactory())
    fill_cart(redis, client.user.id, {"A": 1})
    response = checkout(client)
    assert response.status_code == 422 and response.json()["error"]["code"] == "shipping_address_required"
    assert not Order.objects.exists() and Stock.objects.get(product_id="A").available == 10
    assert checkout(client, "k-2", shipping_address=SHIPPING_ADDRESS).status_code == 201  # the cart is still there


@pytest.mark.parametrize(
    "body",
    [
        {"shipping_address": {**SHIPPING_ADDRESS, "country": "ZZ"}},
        {"shipping_address": "Madrid"},
        {"shipping_address": {**SHIPPING_ADDRESS, "phone": "<script>"}},
        {"shipping_address": None},
    ],
)
def test_a_bad_address_is_a_400_naming_the_field(shopper, body):
    response = shopper.post("/api/orders", body, format="json", HTTP_IDEMPOTENCY_KEY="k-bad")
    assert response.status_code == 400 and "shipping_address" in response.json()["error"]["details"]
    assert not Order.objects.exists()


def test_the_same_key_with_another_address_is_refused(shopper, redis):
    first = checkout(shopper, "same", shipping_address=SHIPPING_ADDRESS)
    fill_cart(redis, shopper.user.id, {"A": 1})
    again = checkout(shopper, "same", shipping_address=SHIPPING_ADDRESS)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = checkout(shopper, "same", shipping_address=ELSEWHERE)
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"


def test_the_shipment_records_the_address_and_the_order_its_dates(shopper, client):
    order_id = checkout(shopper, shipping_address=ELSEWHERE).json()["id"]
    assert post_webhook(client, payment_id="p-1", order_id=order_id, amount=500).status_code == 200
    paid = OutboxEvent.objects.get(event_type="OrderPaid").payload
    assert paid["shipping_address"] == ELSEWHERE
    apply_event(consumer="warehouse", event=consumer_event("OrderPaid", **paid))
    assert Shipment.objects.get(order_id=order_id).shipping_address == ELSEWHERE
    mark_order_shipped(order_id=order_id)
    body = shopper.get(f"/api/orders/{order_id}").json()
    assert body["status"] == "SHIPPED" and body["paid_at"] and body["shipped_at"] and body["cancelled_at"] is None
    assert body["refunds"] == []
    shipped = OutboxEvent.objects.get(event_type="OrderShipped").payload
    apply_event(consumer="email", event=consumer_event("OrderShipped", **shipped))
    assert Notification.objects.get().kind == Notification.Kind.ORDER_SHIPPED
    assert "on its way to Luis, Paris, FR" in mail.outbox[0].body


def test_a_refunded_order_shows_its_refund(shopper, client):
    order_id = checkout(shopper).json()["id"]
    post_webhook(client, payment_id="p-2", order_id=order_id, amount=500)
    refund_paid_order(order_id=order_id)
    body = shopper.get(f"/api/orders/{order_id}").json()
    assert body["status"] == "REFUNDED"
    [refund] = body["refunds"]
    assert refund["status"] == "REQUESTED" and refund["amount"] == 500 and refund["completed_at"] is None
    assert refund["reason"] == "staff" and refund["lines"] == [{"sku": "A", "quantity": 1, "amount": 500, "tax": 0}]


def test_orders_filter_by_status(shopper, redis, client):
    paid = checkout(shopper, "one").json()["id"]
    post_webhook(client, payment_id="p-3", order_id=paid, amount=500)
    fill_cart(redis, shopper.user.id, {"A": 1})
    pending = checkout(shopper, "two").json()["id"]
    assert [o["id"] for o in shopper.get("/api/orders").json()["results"]] == [pending, paid]
    assert [o["id"] for o in shopper.get("/api/orders?status=PAID").json()["results"]] == [paid]
    assert [o["id"] for o in shopper.get(f"/api/orders?status={OrderStatus.PENDING_PAYMENT}").json()["results"]] == [
        pending
    ]
    assert shopper.get("/api/orders?status=SHIPPED").json()["count"] == 0
    bad = shopper.get("/api/orders?status=LOST")
    assert bad.status_code == 400 and "status" in bad.json()["error"]["details"]
