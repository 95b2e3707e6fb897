"""The cart priced with the automatic promotions (shop.pricing.price_lines), as
checkout charges it: per line the catalog price, the discount and the line's
total; for the cart the subtotal, each promotion applied and the total."""

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from cart.apis import CartOutputSerializer, cart_json
from cart.services import CartLine, PricedCart
from cart.storage import cart_key
from shop.models import Promotion
from tests.factories import PromotionFactory, product_with_stock
from tests.helpers import redis_commands

pytestmark = pytest.mark.django_db


def put(client, sku, quantity, token=None):
    headers = {"HTTP_CART_TOKEN": token} if token else {}
    return client.put(f"/api/cart/items/{sku}", {"quantity": quantity}, format="json", **headers)


def fill(client, lines: dict[str, int]) -> dict:
    for sku, quantity in lines.items():
        response = put(client, sku, quantity)
        assert response.status_code == 200, response.content
    return client.get("/api/cart").json()


def assert_adds_up(body: dict) -> None:
    """Every line: quantity x unit price - discount; the cart: the sum of its lines,
    and the subtotal less the discounts."""
    for line in body["items"]:
        assert line["line_total"] == line["quantity"] * line["unit_price"] - line["discount"] >= 0
    assert body["subtotal"] == sum(line["quantity"] * line["unit_price"] for line in body["items"])
    assert sum(line["line_total"] for line in body["items"]) == body["total"]
    assert body["total"] == body["subtotal"] - sum(discount["amount"] for discount in body["discounts"])
    assert sum(line["discount"] for line in body["items"]) == sum(d["amount"] for d in body["discounts"])


def test_cart_shows_a_sku_promotion_on_its_line_and_in_the_totals(auth_client):
    a = product_with_stock(sku="A", name="Alpha", price=999, available=5)
    product_with_stock(sku="B", name="Beta", price=500, available=5)
    spring = PromotionFactory(name="Spring", scope=Promotion.Scope.SKUS, products=[a], kind="percent", value=15)

    body = fill(auth_client, {"A": 3, "B": 1})

    # 15% of 999 is 149.85: 150 off each unit (half up, per unit).
    assert body["items"] == [
        {
            "sku": "A",
            "name": "Alpha",
            "quantity": 3,
            "unit_price": 999,
            "discount": 450,
            "line_total": 2547,
            "tax_rate": 0,
            "net": 2547,
            "tax": 0,
            "gross": 2547,
            "in_stock": True,
        },
        {
            "sku": "B",
            "name": "Beta",
            "quantity": 1,
            "unit_price": 500,
            "discount": 0,
            "line_total": 500,
            "tax_rate": 0,
            "net": 500,
            "tax": 0,
            "gross": 500,
            "in_stock": True,
        },
    ]
    assert body["subtotal"] == 3497
    assert body["discounts"] == [{"promotion_id": spring.id, "name": "Spring", "code": None, "amount": 450}]
    assert body["total"] == 3047
    assert_adds_up(body)


def test_cart_spreads_a_cart_amount_over_the_lines_and_adds_up_exactly(auth_client):
    product_with_stock(sku="A", price=333)
    product_with_stock(sku="B", price=1)
    product_with_stock(sku="C", price=50)
    off = PromotionFactory(name="1000 off", kind=Promotion.Kind.CART_AMOUNT, value=1000, min_subtotal=1000)

    body = fill(auth_client, {"A": 3, "B": 1, "C": 2})

    # 1000 of 1100 in proportion to each line (999, 1, 100): floors 908, 0, 90; the two
    # units left go to the largest remainders, B and C (a tie, in SKU order).
    assert [(line["sku"], line["discount"], line["line_total"]) for line in body["items"]] == [
        ("A", 908, 91),
        ("B", 1, 0),
        ("C", 91, 9),
    ]
    assert (body["subtotal"], body["total"]) == (1100, 100)
    assert body["discounts"] == [{"promotion_id": off.id, "name": "1000 off", "code": None, "amount": 1000}]
    assert_adds_up(body)

    put(auth_client, "A", 2)  # subtotal 767, under the minimum: the promotion no longer applies
    body = auth_client.get("/api/cart").json()
    assert (body["subtotal"], body["discounts"], body["total"]) == (767, [], 767)
    assert_adds_up(body)


def test_cart_stacks_the_best_sku_promotion_and_a_cart_amount(auth_client):
    a = product_with_stock(sku="A", price=1000)
    product_with_stock(sku="B", price=999)
    ten = PromotionFactory(scope=Promotion.Scope.SKUS, products=[a], kind="percent", value=10)
    twenty = PromotionFactory(scope=Promotion.Scope.SKUS, products=[a], kind="amount", value=200)  # the best on A
    off = PromotionFactory(kind=Promotion.Kind.CART_AMOUNT, value=301)

    body = fill(auth_client, {"A": 2, "B": 3})

    assert [(d["promotion_id"], d["amount"]) for d in body["discounts"]] == [(twenty.id, 400), (off.id, 301)]
    assert ten.id not in {d["promotion_id"] for d in body["discounts"]}  # never two automatic ones on a line
    assert body["total"] == 2000 + 2997 - 400 - 301
    assert_adds_up(body)


@pytest.mark.parametrize(
    "window",
    [
        {"starts_at": timedelta(hours=1)},  # not started
        {"starts_at": timedelta(hours=-2), "ends_at": timedelta(hours=-1)},  # ended
        {"starts_at": timedelta(minutes=-2), "ends_at": timedelta(seconds=-1)},  # just ended
    ],
)
def test_cart_leaves_out_a_promotion_outside_its_window(auth_client, window):
    product_with_stock(sku="A", price=1000)
    now = timezone.now()
    PromotionFactory(value=50, **{edge: now + delta for edge, delta in window.items()})

    body = fill(auth_client, {"A": 1})

    assert body["items"][0]["discount"] == 0
    assert (body["subtotal"], body["discounts"], body["total"]) == (1000, [], 1000)


def test_cart_applies_a_promotion_once_it_starts_with_no_cache_dropped(
    auth_client, monkeypatch, django_assert_num_queries
):
    product_with_stock(sku="A", price=1000)
    now = timezone.now()
    later = PromotionFactory(
        name="Later", value=20, starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=2)
    )
    assert fill(auth_client, {"A": 1})["total"] == 1000  # warm, before the start

    # Priced an hour and a half later: the window is checked when pricing, from the cache.
    monkeypatch.setattr("cart.services.timezone", SimpleNamespace(now=lambda: now + timedelta(minutes=90)))
    with django_assert_num_queries(0):
        body = auth_client.get("/api/cart").json()
    assert body["discounts"] == [{"promotion_id": later.id, "name": "Later", "code": None, "amount": 200}]
    assert body["total"] == 800
    monkeypatch.setattr("cart.services.timezone", SimpleNamespace(now=lambda: now + timedelta(hours=2)))
    assert auth_client.get("/api/cart").json()["total"] == 1000  # `ends_at` is excluded


def test_cart_shows_a_promotion_created_after_it_was_read(auth_client, django_capture_on_commit_callbacks):
    product_with_stock(sku="A", price=1000)
    assert fill(auth_client, {"A": 2})["total"] == 2000  # promotions cached: none
    with django_capture_on_commit_callbacks(execute=True):  # the commit moves the cache generation
        promotion = PromotionFactory(value=25)
    body = auth_client.get("/api/cart").json()
    assert body["discounts"] == [{"promotion_id": promotion.id, "name": promotion.name, "code": None, "amount": 500}]
    assert body["total"] == 1500


def test_cart_prices_a_guest_cart_alike(auth_client):
    a = product_with_stock(sku="A", price=999)
    product_with_stock(sku="B", price=1250)
    PromotionFactory(scope=Promotion.Scope.SKUS, products=[a], kind="percent", value=15)
    PromotionFactory(kind=Promotion.Kind.CART_AMOUNT, value=777)
    shoppers = fill(auth_client, {"A": 3, "B": 2})

    guest = APIClient()
    first = put(guest, "A", 3)
    token = first["Cart-Token"]
    written = put(guest, "B", 2, token).json()
    read = guest.get("/api/cart", HTTP_CART_TOKEN=token).json()

    assert written == read == shoppers
    assert shoppers["discounts"] and shoppers["total"] == 2997 + 2500 - 450 - 777
    assert_adds_up(read)


def test_cart_with_unknown_and_inactive_skus_prices_the_rest(auth_client, redis, django_capture_on_commit_callbacks):
    product_with_stock(sku="A", price=1000)
    dropped = product_with_stock(sku="B", price=9000)
    fill(auth_client, {"A": 1, "B": 1})
    redis.hset(cart_key(auth_client.user.id), "GONE", 3)
    with django_capture_on_commit_callbacks(execute=True):
        dropped.is_active = False
        dropped.save()
        # Only if B still counted would the subtotal reach the minimum.
        PromotionFactory(kind=Promotion.Kind.CART_AMOUNT, value=100, min_subtotal=5000)
    body = auth_client.get("/api/cart").json()
    assert [line["sku"] for line in body["items"]] == ["A"]
    assert (body["subtotal"], body["discounts"], body["total"]) == (1000, [], 1000)
    assert {(w["sku"], w["code"]) for w in body["warnings"]} == {("B", "inactive_sku"), ("GONE", "unknown_sku")}


def test_cart_warm_read_with_a_promotion_makes_no_sql_query_and_one_redis_call(
    auth_client, redis, monkeypatch, django_assert_num_queries
):
    a = product_with_stock(sku="A", price=999)
    product_with_stock(sku="B", price=500)
    PromotionFactory(scope=Promotion.Scope.SKUS, products=[a], value=15)
    PromotionFactory(kind=Promotion.Kind.CART_AMOUNT, value=100)
    body = fill(auth_client, {"A": 2, "B": 1})  # warms token, products, stock hints and promotions
    assert len(body["discounts"]) == 2

    sent = redis_commands(redis, monkeypatch)
    with django_assert_num_queries(0):
        assert auth_client.get("/api/cart").json() == body
    assert sent == ["EVALSHA"]
    with django_assert_num_queries(0):  # a write too
        written = put(auth_client, "B", 2).json()
    assert written["subtotal"] == body["subtotal"] + 500 and len(written["discounts"]) == 2
    assert_adds_up(written)


def test_cart_json_matches_the_serializer_with_a_vouchers_code():
    """A voucher's discount carries its code, an automatic one none; both bodies agree."""
    cart = PricedCart(
        items=[CartLine("A", "Alpha", 2, 500, 300, 700, tax_rate=2000, net=583, tax=117, gross=700, in_stock=True)],
        currency="EUR",
        country="ES",
        prices_include_tax=True,
        shipping={
            "code": "standard",
            "name": "Standard",
            "country": "ES",
            "price": 499,
            "discount": 0,
            "net": 416,
            "tax": 83,
            "gross": 499,
            "taxes": [{"rate": 2000, "base": 416, "amount": 83}],
        },
        needs_shipping=True,
        tax=200,
        tax_lines=[{"rate": 2000, "base": 999, "amount": 200}],
        subtotal=1000,
        discounts=[
            {"promotion_id": 1, "name": "Spring", "code": None, "amount": 100},
            {"promotion_id": 2, "name": "Voucher", "code": "SAVE-20", "amount": 200},
        ],
        total=1199,
        warnings=[{"sku": None, "code": "shipping_method_unavailable", "message": "express does not ship to IS."}],
    )
    assert cart_json(cart) == CartOutputSerializer(cart).data


def test_openapi_describes_the_carts_prices_and_discounts():
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    cart, line, discount = components["Cart"], components["CartLine"], components["Discount"]
    assert set(cart["required"]) == {
        *("items", "voucher", "subtotal", "discounts", "total", "currency", "warnings"),
        *("shipping", "needs_shipping", "country", "prices_include_tax", "tax", "tax_lines"),
    }
    assert cart["properties"]["discounts"]["items"]["$ref"].endswith("/Discount")
    assert {"unit_price", "discount", "line_total"} <= set(line["required"])
    assert set(discount["properties"]) == {"promotion_id", "name", "code", "amount"}
    assert set(discount["required"]) == {"promotion_id", "name", "code", "amount"}  # `code`: null unless a voucher
