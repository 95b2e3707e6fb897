"""Shipping and tax from the cart to the order, its events, returns and refunds,
through the API as a shopper uses it (docs/architecture.md, "Totals")."""

from datetime import date

import pytest
from rest_framework.test import APIClient

from orders.models import Order, OrderItem, OrderStatus
from orders.services import approve_return, receive_return
from orders.services.builder import OrderDraft
from orders.services.queue_admission import QueuedRequest
from outbox.models import OutboxEvent
from shop.models import DiscountKind, PromotionScope, ShippingMethod, ShippingRateBand, ShippingZone, TaxRate
from shop.promotions import create_voucher
from tests.factories import PASSWORD, PromotionFactory, product_with_stock
from tests.helpers import checkout, shopper_client
from tests.orders.test_returns import ask, ship

pytestmark = pytest.mark.django_db

GB_ADDRESS = {
    "name": "Ada Lovelace",
    "line1": "1 Analytical Row",
    "city": "London",
    "postal_code": "N1 9GU",
    "country": "GB",
    "phone": "+44 20 7946 0000",
}


@pytest.fixture
def uk_shop(settings):
    """A MUG at 12.99 (350 g) taxed at GB's 20% standard rate; `standard` ships to GB for 4.99."""
    settings.PRICES_INCLUDE_TAX = True
    TaxRate.objects.create(country="GB", tax_class_id="standard", rate=2000, valid_from=date(2000, 1, 1))
    TaxRate.objects.create(country="GB", tax_class_id="reduced", rate=500, valid_from=date(2000, 1, 1))
    uk = ShippingZone.objects.create(name="United Kingdom", countries=["GB"])
    ShippingMethod.objects.create(code="standard", name="Standard", zone=uk, price=499, min_days=2, max_days=4)
    product_with_stock(sku="MUG", name="Mug", price=1299, available=50, weight_grams=350)
    return uk


def put(client, path, body):
    return client.put(path, body, format="json")


def choose(client, code="standard", country="GB"):
    return put(client, "/api/cart/shipping-method", {"code": code, "country": country})


def test_a_cart_to_gb_adds_up_and_its_order_charges_the_same(uk_shop):
    client = shopper_client()
    assert put(client, "/api/cart/items/MUG", {"quantity": 2}).status_code == 200
    cart = choose(client).json()

    # 2 x 12.99 = 25.98, tax inside: 25.98 x 20/120 = 4.33; shipping 4.99 carries 0.83 of tax.
    assert cart["items"][0] | {} == {**cart["items"][0], "line_total": 2598, "net": 2165, "tax": 433, "gross": 2598}
    assert cart["items"][0]["tax_rate"] == 2000
    assert cart["shipping"] == {
        "code": "standard",
        "name": "Standard",
        "country": "GB",
        "price": 499,
        "discount": 0,
        "net": 416,
        "tax": 83,
        "gross": 499,
        "taxes": [{"rate": 2000, "base": 416, "amount": 83}],
    }
    assert (cart["subtotal"], cart["tax"], cart["total"], cart["country"]) == (2598, 516, 3097, "GB")
    assert cart["tax_lines"] == [{"rate": 2000, "base": 2581, "amount": 516}]
    assert sum(line["base"] + line["amount"] for line in cart["tax_lines"]) == cart["total"]
    assert client.get("/api/cart").json() == cart

    response = client.post("/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["total"], body["tax"], body["tax_country"], body["prices_include_tax"]) == (3097, 516, "GB", True)
    assert body["shipping"]["gross"] == 499 and body["tax_lines"] == cart["tax_lines"]
    assert (body["items"][0]["net"], body["items"][0]["tax"], body["items"][0]["gross"]) == (2165, 433, 2598)
    order = Order.objects.get(id=body["id"])
    assert (order.total_amount, order.tax_amount, order.shipping_amount) == (3097, 516, 499)
    created = OutboxEvent.objects.get(aggregate_id=order.id, event_type="OrderCreated").payload
    assert (created["total"], created["tax"], created["shipping"]["code"]) == (3097, 516, "standard")
    assert created["items"][0] | {"net": 2165, "tax": 433, "gross": 2598} == created["items"][0]


def test_checkout_refuses_a_method_that_does_not_ship_to_the_address(uk_shop):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    choose(client)
    us = {**GB_ADDRESS, "country": "US", "postal_code": "10001"}
    response = client.post("/api/orders", {"shipping_address": us}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["details"]) == ("shipping_method_unavailable", {"code": "standard", "country": "US"})
    assert not Order.objects.exists()
    assert client.get("/api/cart").json()["items"][0]["quantity"] == 1  # the cart is given back


def test_goods_that_ship_need_a_method_and_goods_that_weigh_nothing_do_not(uk_shop):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    post = lambda key: client.post(  # noqa: E731
        "/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    response = post("k1")
    assert (response.status_code, response.json()["error"]["code"]) == (422, "shipping_method_required")

    product_with_stock(sku="EBOOK", price=500, available=5)  # weight 0: not shipped
    put(client, "/api/cart/items/MUG", {"quantity": 0})
    put(client, "/api/cart/items/EBOOK", {"quantity": 1})
    cart = client.get("/api/cart").json()
    assert (cart["needs_shipping"], cart["shipping"]) == (False, None)
    response = post("k2")
    assert response.status_code == 201 and response.json()["shipping"] is None


def test_choosing_a_method_is_checked_and_kept_with_the_cart(uk_shop):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    unknown = choose(client, code="teleport")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (422, "shipping_method_unknown")
    elsewhere = choose(client, country="FR")
    assert elsewhere.status_code == 422
    assert elsewhere.json()["error"]["details"] == {"code": "standard", "country": "FR"}
    assert choose(client, country="XX").status_code == 400
    assert client.get("/api/cart").json()["shipping"] is None  # nothing kept by the refusals

    assert choose(client, country="gb").json()["shipping"]["country"] == "GB"
    assert client.delete("/api/cart/shipping-method").status_code == 204
    assert client.get("/api/cart").json()["shipping"] is None


def test_shipping_methods_are_listed_per_country_and_priced_for_a_cart(uk_shop):
    heavy = ShippingMethod.objects.create(
        code="parcel", name="Parcel", zone=uk_shop, pricing=ShippingMethod.Pricing.WEIGHT, max_days=5
    )
    ShippingRateBand.objects.create(method=heavy, up_to_grams=500, price=350)
    ShippingRateBand.objects.create(method=heavy, up_to_grams=1000, price=650)
    public = APIClient().get("/api/shipping-methods?country=GB")
    assert public.status_code == 200
    assert [(m["code"], m["price"], m["available"]) for m in public.json()] == [
        ("parcel", None, True),
        ("standard", None, True),
    ]
    assert APIClient().get("/api/shipping-methods?country=US").json() == []
    assert APIClient().get("/api/shipping-methods").status_code == 400

    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})  # 700 g: the second band
    priced = client.get("/api/shipping-methods?country=GB").json()
    assert [(m["code"], m["price"], m["available"]) for m in priced] == [("parcel", 650, True), ("standard", 499, True)]
    put(client, "/api/cart/items/MUG", {"quantity": 3})  # 1050 g: too heavy for the parcel
    assert client.get("/api/shipping-methods?country=GB").json()[0]["available"] is False
    choose(client, code="parcel")
    cart = client.get("/api/cart").json()
    assert cart["shipping"] is None and cart["warnings"][0]["code"] == "shipping_method_unavailable"


def test_a_free_shipping_voucher_takes_the_shipping_off(uk_shop):
    voucher = create_voucher(code="SHIPFREE", percent=10, name="Free shipping")
    voucher.kind, voucher.scope, voucher.value = DiscountKind.FREE_SHIPPING, PromotionScope.CART, 100
    voucher.save()
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    cart = put(client, "/api/cart/voucher", {"code": "shipfree"}).json()
    assert cart["shipping"] | {"discount": 499, "gross": 0, "tax": 0} == cart["shipping"]
    assert cart["discounts"] == [
        {"promotion_id": voucher.id, "name": "Free shipping", "code": "SHIPFREE", "amount": 499}
    ]
    assert (cart["total"], cart["tax"]) == (2598, 433)
    response = client.post("/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 201
    voucher.refresh_from_db()
    assert (response.json()["total"], voucher.uses) == (2598, 1)  # the voucher's use is counted


def test_an_automatic_free_shipping_promotion_over_a_subtotal(uk_shop):
    PromotionFactory(
        name="Free over 20", kind=DiscountKind.FREE_SHIPPING, scope=PromotionScope.CART, value=100, min_subtotal=2000
    )
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    assert choose(client).json()["shipping"]["gross"] == 499  # 12.99: under the minimum
    cart = put(client, "/api/cart/items/MUG", {"quantity": 2}).json()
    assert (cart["shipping"]["gross"], cart["total"]) == (0, 2598)


def test_prices_without_tax_add_it_on_top(uk_shop, settings):
    settings.PRICES_INCLUDE_TAX = False
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    cart = choose(client).json()
    # 25.98 + 20% = 31.18 (5.196 -> 5.20); shipping 4.99 + 1.00 (0.998).
    assert (cart["items"][0]["net"], cart["items"][0]["tax"], cart["items"][0]["gross"]) == (2598, 520, 3118)
    assert (cart["shipping"]["net"], cart["shipping"]["tax"], cart["shipping"]["gross"]) == (499, 100, 599)
    assert (cart["tax"], cart["total"], cart["prices_include_tax"]) == (620, 3717, False)


def test_returning_one_of_two_units_refunds_its_gross_and_its_share_of_the_tax(uk_shop, redis, provider):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    order_id = checkout_gb(client)
    order = Order.objects.get(id=order_id)
    ship(order)
    asked = ask(client, order, [{"sku": "MUG", "quantity": 1}])
    assert asked.status_code == 201, asked.content
    approve_return(return_id=asked.json()["id"])
    refund = receive_return(return_id=asked.json()["id"], conditions={"MUG": "restock"}).refund
    # One unit of 25.98 with 4.33 of tax: 12.99 back, of it 12.99 - 10.83 (the net's share, rounded up) = 2.16 tax.
    assert (refund.amount, refund.lines) == (1299, [{"sku": "MUG", "quantity": 1, "amount": 1299, "tax": 216}])
    body = client.get(f"/api/orders/{order_id}").json()
    assert body["refunds"][0]["lines"][0]["tax"] == 216
    item = OrderItem.objects.get(order_id=order_id)
    # The other unit gives back the rest: together exactly what was charged, tax included.
    assert item.price_of_units(first=1, count=1) + 1299 == item.gross
    assert item.tax_of_units(first=1, count=1) + 216 == item.tax


def checkout_gb(client) -> int:
    response = client.post("/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_a_guest_carts_shipping_method_comes_with_it_at_login(uk_shop):
    guest = APIClient()
    token = put(guest, "/api/cart/items/MUG", {"quantity": 1})["Cart-Token"]
    chosen = guest.put(
        "/api/cart/shipping-method", {"code": "standard", "country": "GB"}, format="json", HTTP_CART_TOKEN=token
    )
    assert chosen.status_code == 200 and chosen.json()["shipping"]["code"] == "standard"
    client = shopper_client()
    login = APIClient().post(
        "/api/auth/token",
        {"username": client.user.username, "password": PASSWORD},
        format="json",
        HTTP_CART_TOKEN=token,
    )
    assert login.status_code == 200 and login.json()["cart_merged"] == 1
    cart = client.get("/api/cart").json()
    assert (cart["shipping"]["code"], cart["country"]) == ("standard", "GB")


def test_a_queued_checkout_carries_shipping_and_tax_to_the_writer(uk_shop, redis):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    from orders.services.builder import price_cart

    priced = price_cart({"MUG": 2}, country="GB", shipping_code="standard")
    draft = OrderDraft(client.user.id, "k", priced.lines, "EUR", GB_ADDRESS, 900, "", priced.discounts, priced.charges)
    travelled = QueuedRequest.from_json(QueuedRequest.of(7, draft, gated={}, queue_sku="MUG").to_json())
    built = travelled.build(now=draft_now())
    assert (built.fields["total_amount"], built.fields["tax_amount"], built.fields["shipping_amount"]) == (
        3097,
        516,
        499,
    )
    assert built.fields["request_hash"] == draft.request_hash
    assert [item["gross"] for item in built.items] == [2598]
    assert built.fields["status"] == OrderStatus.PENDING_PAYMENT


def draft_now():
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_checkout_without_a_body_uses_the_saved_address_country(uk_shop):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    choose(client)
    assert put(client, "/api/auth/me/address", GB_ADDRESS).status_code in (200, 201)
    response = checkout(client, "k")
    assert response.status_code == 201, response.content
    assert response.json()["tax_country"] == "GB"


def test_the_confirmation_and_the_receipt_print_shipping_and_the_vat(uk_shop, provider):
    from django.core import mail
    from django.test import Client

    from orders.handlers import receipt_text, send_order_confirmation
    from tests.helpers import consumer_event, post_webhook

    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    order_id = checkout_gb(client)
    assert post_webhook(Client(), payment_id="pay_t", order_id=order_id, amount=3097).status_code == 200
    paid = OutboxEvent.objects.get(aggregate_id=order_id, event_type="OrderPaid").payload
    assert (paid["tax"], paid["tax_lines"], paid["shipping"]["gross"]) == (
        516,
        [{"rate": 2000, "base": 2581, "amount": 516}],
        499,
    )
    send_order_confirmation(consumer_event("OrderPaid", **paid))
    [sent] = mail.outbox
    assert "Shipping: Standard  €4.99" in sent.body and "Total  €30.97" in sent.body
    assert "incl. VAT 20% on €25.81: €5.16" in sent.body
    receipt = receipt_text(order_id)
    assert "2 x MUG (Mug)  €25.98" in receipt and "incl. VAT 20% on €25.81: €5.16" in receipt


def paid_gb_order(client, lines: dict, status="succeeded") -> Order:
    from django.test import Client

    from tests.helpers import post_webhook

    for sku, quantity in lines.items():
        put(client, f"/api/cart/items/{sku}", {"quantity": quantity})
    choose(client)
    order = Order.objects.get(id=checkout_gb(client))
    response = post_webhook(
        Client(), payment_id=f"pay_{order.id}", order_id=order.id, amount=order.total_amount, status=status
    )
    assert response.status_code == 200
    return order


def test_refunding_a_paid_order_pays_its_shipping_back_too(uk_shop, provider):
    from orders.models import Payment
    from orders.services import refund_paid_order

    order = paid_gb_order(shopper_client(), {"MUG": 2})
    refund = refund_paid_order(order_id=order.id)
    assert refund.amount == 3097 == order.total_amount
    assert refund.lines == [
        {"sku": "MUG", "quantity": 2, "amount": 2598, "tax": 433},
        {"shipping": "standard", "amount": 499, "tax": 83},
    ]
    order.refresh_from_db()
    assert order.status == OrderStatus.REFUNDED
    assert Payment.objects.get(order=order).captured_amount == 3097


def test_returning_every_unit_refunds_the_goods_and_the_order_though_shipping_is_kept(uk_shop, redis, provider):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    order = Order.objects.get(id=checkout_gb(client))
    ship(order, payment_id="pay_ret")  # paid, shipped, the whole 30.97 captured
    asked = ask(client, order, [{"sku": "MUG", "quantity": 2}])
    approve_return(return_id=asked.json()["id"])
    refund = receive_return(return_id=asked.json()["id"], conditions={"MUG": "restock"}).refund
    assert refund.amount == 2598  # the goods, tax included; the 4.99 of shipping is not paid back with a return
    order.refresh_from_db()
    payment = order.payments.get()
    assert (payment.captured_amount, payment.refunded_amount) == (3097, 2598)
    assert order.status == OrderStatus.REFUNDED  # every unit's money back: the shipping stays paid


def test_removing_the_last_goods_that_ship_takes_the_shipping_off_too(uk_shop, provider):
    from orders.services import remove_order_lines

    product_with_stock(sku="EBOOK", name="E-book", price=500, available=5)  # weighs nothing
    order = paid_gb_order(shopper_client(), {"MUG": 1, "EBOOK": 1}, status="authorized")
    assert (order.total_amount, order.shipping_amount) == (1299 + 500 + 499, 499)
    remove_order_lines(order_id=order.id, lines={"MUG": 1})
    order.refresh_from_db()
    assert (order.total_amount, order.shipping_amount, order.shipping) == (500, 0, None)
    assert order.tax_amount == 83  # the e-book's 20% inside 5.00 (83.3)
    event = OutboxEvent.objects.filter(aggregate_id=order.id, event_type="OrderLinesCancelled").get().payload
    assert event["lines"][-1] == {"shipping": "standard", "amount": 499, "tax": 83}
    assert event["amount"] == 1299 + 499


def test_a_warm_cart_with_shipping_and_tax_reads_no_sql(uk_shop, django_assert_num_queries):
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    put(client, "/api/cart/items/MUG", {"quantity": 3})  # priced anew: rates and methods from memory
    with django_assert_num_queries(0):
        cart = client.get("/api/cart").json()
    assert (cart["shipping"]["gross"], cart["tax"] > 0) == (499, True)


def test_a_return_capped_by_an_earlier_goodwill_refund_says_the_tax_of_what_it_pays(uk_shop, redis, provider):
    from orders.services import refund_goodwill

    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    order = Order.objects.get(id=checkout_gb(client))
    ship(order, payment_id="pay_cap")
    refund_goodwill(order_id=order.id, amount=2000, note="late")
    asked = ask(client, order, [{"sku": "MUG", "quantity": 2}])
    approve_return(return_id=asked.json()["id"])
    refund = receive_return(return_id=asked.json()["id"], conditions={"MUG": "restock"}).refund
    # 30.97 captured, 20.00 back already: the 25.98 of goods gets 10.97, with its share of the 4.33 of tax.
    assert refund.amount == 1097
    assert refund.lines == [{"sku": "MUG", "quantity": 2, "amount": 1097, "tax": 433 * 1097 // 2598}]


def test_a_retry_replays_the_order_and_the_same_key_with_another_shipping_is_refused(uk_shop):
    express = ShippingMethod.objects.create(code="express", name="Express", zone=uk_shop, price=999)
    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    choose(client)
    first = client.post("/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    again = client.post("/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (first.status_code, again.status_code, again["Idempotent-Replayed"]) == (201, 200, "true")
    assert again.json()["id"] == first.json()["id"] and again.json()["total"] == 1299 + 499
    put(client, "/api/cart/items/MUG", {"quantity": 1})
    choose(client, code=express.code)  # the same cart, another shipping: another request
    other = client.post("/api/orders", {"shipping_address": GB_ADDRESS}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (other.status_code, other.json()["error"]["code"]) == (422, "idempotency_key_reused")
    assert Order.objects.count() == 1


def test_the_admin_and_the_csv_export_show_the_orders_tax_and_shipping(uk_shop):
    import csv
    import io

    from tests.helpers import staff_client

    client = shopper_client()
    put(client, "/api/cart/items/MUG", {"quantity": 2})
    choose(client)
    order_id = checkout_gb(client)
    admin = staff_client(superuser=True)
    page = admin.get(f"/admin/orders/order/{order_id}/change/").content.decode()
    assert "Standard (standard): €4.99" in page
    assert "€5.16 (included in the prices; GB)" in page and "20% on €25.81: €5.16" in page
    assert "€4.33 (20%)" in page and "€25.98" in page  # the line's tax and what it was charged
    form = {"action": "export_csv", "select_across": "1", "index": "0", "_selected_action": [order_id]}
    rows = list(
        csv.DictReader(io.StringIO(b"".join(admin.post("/admin/orders/order/", form).streaming_content).decode()))
    )
    assert [(r["total"], r["net"], r["tax"], r["shipping"], r["shipping_method"]) for r in rows] == [
        ("3097", "2581", "516", "499", "standard")
    ]
