"""Hostile or absurd input gets a 4xx JSON error (401 for the webhook) and
writes nothing: never a 500, never an HTML page, never a traceback."""

import json
import logging
import time

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inventory.models import Stock, StockMovement
from orders.models import Order, OrderStatus, Payment
from orders.signatures import sign
from shop.models import MAX_PRICE, Product
from tests.factories import UserFactory, product_with_stock
from tests.helpers import (
    adjust,
    checkout,
    fill_cart,
    place_pending_order,
    shopper_client,
    staff_client,
    stop_redis_for_this_process,
)

pytestmark = pytest.mark.django_db

BODY_ENDPOINTS = [
    ("put", "/api/cart/items/MUG"),
    ("post", "/api/auth/register"),
    ("post", "/api/auth/token"),
    ("post", "/api/payments/webhook"),
]


def assert_json_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"])
    if code:
        assert body["error"]["code"] == code, body
    return body


def send(client, method: str, path: str, body: bytes, **headers):
    if path == "/api/payments/webhook" and "HTTP_PAYMENT_SIGNATURE" not in headers:
        headers["HTTP_PAYMENT_SIGNATURE"] = sign(body=body, secret=settings.PAYMENT_WEBHOOK_SECRET)
    return getattr(client, method)(path, body, content_type="application/json", **headers)


# --- bodies too big or too deep ------------------------------------------------


@pytest.mark.parametrize("method,path", BODY_ENDPOINTS)
def test_a_10_mb_body_is_413_with_the_json_envelope(method, path):
    client = shopper_client()
    body = json.dumps({"quantity": 1, "pad": "x" * 10_000_000}).encode()
    assert_json_error(send(client, method, path, body), 413, "payload_too_large")


@pytest.mark.parametrize("method,path", BODY_ENDPOINTS)
@pytest.mark.parametrize("shape", ["array", "object"])
def test_json_nested_100_000_deep_is_400(method, path, shape):
    client = shopper_client()
    body = ("[" * 100_000 + "]" * 100_000) if shape == "array" else ('{"a":' * 100_000 + "1" + "}" * 100_000)
    response = send(client, method, path, body.encode(), HTTP_IDEMPOTENCY_KEY="k-1")
    assert_json_error(response, 400)


@pytest.mark.parametrize("method,path", BODY_ENDPOINTS)
def test_json_nested_past_the_depth_limit_is_400_even_when_the_parser_could(method, path):
    client = shopper_client()
    body = '{"quantity": 1, "x": ' + "[" * 200 + "]" * 200 + "}"
    assert_json_error(send(client, method, path, body.encode()), 400, "malformed_request")


def test_an_ordinary_nested_body_still_parses(redis):
    product_with_stock(sku="MUG", price=100)
    client = shopper_client()
    body = json.dumps({"quantity": 2, "meta": {"a": [[{"b": [1]}]]}}).encode()
    assert send(client, "put", "/api/cart/items/MUG", body).status_code == 200


# --- paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/api/orders/-1", "/api/orders/abc", "/api/cart/items/a%2Fb", "/api/nothing-here", "/api/orders/1/nope"],
)
def test_unrouted_api_paths_are_json_404_even_with_debug_on(settings, path):
    settings.DEBUG = True  # Django's technical 404 page would list the URL patterns
    client = shopper_client()
    assert_json_error(client.get(path), 404, "not_found")


@pytest.mark.parametrize("sku", ["MUG%00LOGO", "MUG%0ALOGO", "%C3%A9t%C3%A9", "x" * 65, "a%20b"])
def test_a_sku_of_the_wrong_shape_is_404_without_a_query(sku):
    status, code = (400, "invalid") if "%00" in sku else (404, "not_found")  # a NUL in any URL is a 400
    client = shopper_client()
    client.get("/api/cart")  # warm the token cache: the next request needs no SQL
    with CaptureQueriesContext(connection) as queries:
        response = client.put(f"/api/cart/items/{sku}", {"quantity": 1}, format="json")
    assert_json_error(response, status, code)
    assert len(queries) == 0, [q["sql"] for q in queries]
    assert client.delete(f"/api/cart/items/{sku}").status_code == status


# --- the payment webhook ------------------------------------------------------------


@pytest.fixture
def order(redis):
    product_with_stock(sku="MUG", price=250, available=10)
    return place_pending_order(redis, UserFactory(), {"MUG": 2})


def webhook_body(order, **extra) -> bytes:
    payload = {"payment_id": "pay_1", "order_id": order.id, "amount": 500, "currency": "EUR", "status": "succeeded"}
    return json.dumps({**payload, **extra}).encode()


@pytest.mark.parametrize(
    "header",
    [
        "t=\u00b2,v1=" + "0" * 64,  # a non-ASCII digit: str.isdigit() says yes, int() says no
        "t=" + "9" * 400 + ",v1=" + "0" * 64,  # too large for a float
        "t=" + "1" * 5000 + ",v1=" + "0" * 64,  # past Python's int-from-string limit
        "t={now},v1=\u00e9\u00e9",  # hmac.compare_digest refuses a non-ASCII str
        "t=,v1=",
        "v1=abc",
        "t=1700000000",
        "\u00ff" * 10,
    ],
)
def test_webhook_signature_oddities_are_401(client, order, header):
    header = header.replace("{now}", str(int(time.time())))
    response = client.post(
        "/api/payments/webhook", webhook_body(order), content_type="application/json", HTTP_PAYMENT_SIGNATURE=header
    )
    assert_json_error(response, 401, "invalid_signature")
    assert not Payment.objects.exists()


def test_webhook_body_over_the_upload_limit_is_413_and_records_nothing(client, order):
    body = webhook_body(order, pad="x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1))
    assert_json_error(send(client, "post", "/api/payments/webhook", body), 413, "payload_too_large")
    assert not Payment.objects.exists()


@pytest.mark.parametrize(
    "extra",
    [{"note": "a\u0000b"}, {"nested": {"k\u0000": ["\u0000"]}}, {"payment_method": {"brand": "vi\u0000sa"}}],
)
def test_a_signed_webhook_with_nul_characters_still_pays_the_order(client, order, extra):
    body = webhook_body(order, **extra)
    assert b"\\u0000" in body
    response = send(client, "post", "/api/payments/webhook", body)
    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "applied"
    order.refresh_from_db()
    assert order.status == OrderStatus.PAID
    payment = Payment.objects.get()
    assert json.loads(payment.raw_body) == json.loads(body)  # the exact signed bytes, NULs included
    assert send(client, "post", "/api/payments/webhook", body).json()["redelivered"] is True


def test_a_nul_in_the_webhook_payment_id_is_400(client, order):
    body = webhook_body(order, payment_id="pay\u00001")
    assert_json_error(send(client, "post", "/api/payments/webhook", body), 400, "invalid")
    assert not Payment.objects.exists()


# --- numbers too large for their columns -----------------------------------------------


def test_receiving_int_max_units_on_top_of_stock_is_refused_and_writes_nothing():
    product_with_stock(sku="MUG", available=5)
    manager = staff_client("Stock managers")
    response = adjust(manager, "MUG", "receive", 2**31 - 1)
    assert response.status_code == 302
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("at most" in m for m in messages), messages
    assert Stock.objects.get(product_id="MUG").available == 5
    assert StockMovement.objects.filter(product_id="MUG").count() == 1


def test_bulk_receive_that_would_overflow_one_sku_receives_none():
    product_with_stock(sku="A", available=1)
    product_with_stock(sku="B", available=2**31 - 10)
    manager = staff_client("Stock managers")
    response = manager.post(
        "/admin/inventory/stock/",
        {"action": "bulk_receive", "_selected_action": ["A", "B"], "quantity": 100, "note": "truck", "apply": "1"},
    )
    assert response.status_code in (200, 302)
    assert Stock.objects.get(product_id="A").available == 1  # all or nothing
    assert not StockMovement.objects.filter(note="truck").exists()


def test_a_price_above_the_maximum_is_refused_by_the_database():
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Product.objects.create(sku="GOLD", name="Gold", price=MAX_PRICE + 1)


def test_the_largest_order_the_limits_allow_fits_its_total(redis):
    customer = UserFactory()
    skus = {f"GOLD-{i:03d}": settings.CART_MAX_QUANTITY for i in range(settings.CART_MAX_LINES)}
    for sku in skus:
        product_with_stock(sku=sku, price=MAX_PRICE, available=settings.CART_MAX_QUANTITY)
    fill_cart(redis, customer.id, skus)
    response = checkout(shopper_client(customer))
    assert response.status_code == 201, response.content
    total = MAX_PRICE * settings.CART_MAX_QUANTITY * settings.CART_MAX_LINES
    assert response.json()["total"] == total == Order.objects.get().total_amount
    assert total < 2**63


# --- Redis down --------------------------------------------------------------------------


def test_redis_down_on_an_api_request_reading_the_generation_is_503(settings):
    client = shopper_client()
    stop_redis_for_this_process(settings)
    responses = [
        client.get("/api/cart"),
        client.put("/api/cart/items/MUG", {"quantity": 1}, format="json"),
        checkout(client),
        client.get("/api/orders"),
    ]
    for response in responses:
        assert_json_error(response, 503, "cache_unavailable")
    assert not Order.objects.exists()


def test_redis_down_while_staff_save_a_product_is_503_and_the_change_rolls_back(settings):
    product_with_stock(sku="MUG", price=100)
    admin = staff_client(superuser=True)
    stop_redis_for_this_process(settings)
    response = admin.post(
        "/admin/shop/product/MUG/change/",
        {"sku": "MUG", "name": "Renamed", "price": 200, "is_active": "on", "weight_grams": 0, "tax_class": "standard"},
    )
    assert_json_error(response, 503, "cache_unavailable")
    assert Product.objects.get(sku="MUG").price == 100  # no cache could be told: nothing changed


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
def test_the_api_takes_json_bodies_only(content_type):
    client = shopper_client()
    response = client.generic("POST", "/api/auth/token", b"username=a&password=b", content_type=content_type)
    assert_json_error(response, 415, "unsupported_media_type")


@pytest.mark.parametrize("method", ["put", "post", "delete"])
def test_a_write_to_an_unrouted_api_path_is_a_json_404_not_a_csrf_page(method):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)  # as a real client: no CSRF exemption for tests
    response = getattr(client, method)("/api/cart/items/a%20b", b"{}", content_type="application/json")
    assert_json_error(response, 404, "not_found")


# --- strings that are not text, methods nobody documents --------------------------------

SURROGATE = '"\\ud800"'  # a lone surrogate, as JSON spells it


@pytest.mark.parametrize(
    "method,path,body",
    [
        (
            "put",
            "/api/auth/me/address",
            '{"name": "A", "line1": "B", "city": "C", "postal_code": "1", '
            f'"country": {SURROGATE}, "phone": "+34 600"}}',
        ),
        ("post", "/api/orders", f'{{"shipping_address": {{"country": {SURROGATE}}}}}'),
        ("put", "/api/cart/items/MUG", f'{{"quantity": 1, {SURROGATE}: 2}}'),
    ],
)
def test_a_lone_surrogate_in_a_body_is_400(redis, method, path, body):
    product_with_stock(sku="MUG", price=1200, available=3)
    client = shopper_client()
    response = getattr(client, method)(path, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert_json_error(response, 400)
    assert not Order.objects.exists()


def test_a_lone_surrogate_in_a_signed_webhook_is_400_and_records_nothing(client, order):
    body = webhook_body(order).replace(b'"succeeded"', SURROGATE.encode())
    assert_json_error(send(client, "post", "/api/payments/webhook", body), 400)
    assert not Payment.objects.exists()


@pytest.mark.parametrize("path", ["/api/products", "/api/products/MUG", "/api/orders", "/api/cart", "/healthz"])
@pytest.mark.parametrize("method", ["options", "head"])
def test_options_and_head_answer_without_an_error(client, redis, method, path):
    product_with_stock(sku="MUG", price=1200, available=3)
    response = getattr(client, method)(path)
    assert response.status_code < 500, (response.status_code, response.content[:300])


@pytest.mark.parametrize("path", ["/api/products", "/admin/login/"])
def test_a_foreign_host_is_a_400_and_one_warning_line_without_a_traceback(client, caplog, path):
    response = client.get(path, HTTP_HOST="evil.example")
    assert response.status_code == 400
    told = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert [(record.name, record.levelname) for record in told] == [("django.security.DisallowedHost", "WARNING")]
    assert "evil.example" in told[0].getMessage() and told[0].exc_info is None and told[0].exc_text is None
