"""config/admin.py: the admin site as a whole: its login, the staff groups' reach
across every app's admin, and change lists that stay cheap at scale."""

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from inventory.models import Stock
from inventory.services import receive_stock
from orders.models import OrderStatus
from tests.factories import ProductFactory, UserFactory, product_with_stock
from tests.helpers import adjust, failed_api_login, staff_client

pytestmark = pytest.mark.django_db


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
    assert Stock.objects.get(product_id="A").available == 6

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
    for url in (
        "/admin/orders/order/",
        "/admin/inventory/stock/",
        "/admin/orders/order/?status__exact=PENDING_PAYMENT",
        "/admin/inventory/stock/?low=no",
        "/admin/shop/product/",
    ):
        with django_assert_max_num_queries(20):
            assert admin.get(url).status_code == 200, url
    assert ProductFactory._meta.model.objects.count() == 10000


def test_the_admin_login_shares_the_api_login_limit(client, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "auth": "5/min"}
    UserFactory(username="staff", is_staff=True)
    for _ in range(3):
        failed_api_login(client)
    attempts = [client.post("/admin/login/", {"username": "staff", "password": "wrong"}).status_code for _ in range(3)]
    assert attempts == [200, 200, 429]  # 200: the form again, with its error
    refused = client.post("/admin/login/", {"username": "staff", "password": "wrong"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert client.get("/admin/login/").status_code == 200  # looking at the form is not an attempt


def test_stock_managers_edit_a_products_description_and_image(stock_manager):
    product = ProductFactory(sku="DESC-1")
    form = {
        "name": product.name,
        "price": product.price,
        "is_active": "on",
        "weight_grams": 350,
        "tax_class": "standard",
        "description": "Stoneware, 350 ml",
        "image_url": "https://img.example.com/desc-1.jpg",
        "_save": "Save",
    }
    assert stock_manager.post("/admin/shop/product/DESC-1/change/", form).status_code == 302
    product.refresh_from_db()
    assert (product.description, product.image_url) == ("Stoneware, 350 ml", "https://img.example.com/desc-1.jpg")
    bad = stock_manager.post("/admin/shop/product/DESC-1/change/", {**form, "image_url": "javascript:alert(1)"})
    assert bad.status_code == 200 and "Enter a valid URL" in bad.content.decode()


def test_every_changelist_takes_nul_and_surrogate_filter_values_without_an_error(redis):
    """Each registered model's list, searched and filtered with a NUL (PostgreSQL
    refuses it in text) and with a UTF-8-encoded surrogate: a 4xx or a page, never a 500."""
    from django.contrib import admin
    from django.contrib.admin.utils import get_fields_from_path

    client = staff_client(superuser=True)
    for model, model_admin in admin.site._registry.items():
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        queries = ["q=a%00b", "q=%ED%A0%80", "o=1%00"]
        for spec in model_admin.list_filter:
            if isinstance(spec, str):
                field = get_fields_from_path(model, spec)[-1]
                name = f"{spec}__id__exact" if field.is_relation else f"{spec}__exact"
                queries += [f"{name}=X%00", f"{name}=%ED%A0%80"]
        for query in queries:
            response = client.get(f"{url}?{query}")
            assert response.status_code < 500, (url, query, response.status_code)
    assert client.get("/admin/orders/order/?status__exact=PAID%00").status_code == 400
