"""inventory/apis.py: the public catalog (GET /api/products, /api/products/{sku}),
from process memory once warm, with ETag / 304 and a short max-age."""

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.hotcache import hot_cache
from inventory.services import receive_stock
from inventory.services.flash_sales import seed_flash_sale
from shop.models import Product
from tests.factories import ProductFactory, product_with_stock

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog():
    product_with_stock(sku="MUG-RED", name="Red mug", price=900, available=5)
    product_with_stock(sku="MUG-BLUE", name="Blue mug", price=700, available=0)
    product_with_stock(sku="TEE-1", name="T-shirt", price=1500, available=2)
    ProductFactory(sku="OLD-1", name="Old mug", is_active=False)


def skus(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [p["sku"] for p in response.json()["results"]]


def test_the_list_is_public_paginated_and_shows_each_product(api_client, catalog):
    response = api_client.get("/api/products?page_size=2")
    body = response.json()
    assert body["count"] == 3 and body["next"].endswith("page=2&page_size=2") and body["previous"] is None
    assert body["results"][0] == {
        "sku": "MUG-BLUE",
        "name": "Blue mug",
        "description": "",
        "image_url": "",
        "price": 700,
        "currency": "EUR",
        "available": 0,
        "in_stock": False,
        "flash_sale": None,
    }
    assert skus(api_client.get("/api/products?page=2&page_size=2")) == ["TEE-1"]
    assert api_client.get("/api/products?page=9").status_code == 404
    assert len(skus(api_client.get("/api/products?page_size=500"))) == 3  # capped at 100, not refused


def test_search_filter_and_sort(api_client, catalog):
    assert skus(api_client.get("/api/products?q=MUG")) == ["MUG-BLUE", "MUG-RED"]  # inactive OLD-1 is not for sale
    assert skus(api_client.get("/api/products?q=t-SHIRT")) == ["TEE-1"]  # the name, any case
    assert skus(api_client.get("/api/products?in_stock=true")) == ["MUG-RED", "TEE-1"]
    assert skus(api_client.get("/api/products?sort=-price")) == ["TEE-1", "MUG-RED", "MUG-BLUE"]
    assert skus(api_client.get("/api/products?sort=price")) == ["MUG-BLUE", "MUG-RED", "TEE-1"]
    assert skus(api_client.get("/api/products?sort=name")) == ["MUG-BLUE", "MUG-RED", "TEE-1"]


@pytest.mark.parametrize("query", ["sort=colour", "in_stock=maybe", "q=" + "x" * 101, "page_size=abc"])
def test_bad_parameters_are_a_400_or_ignored_never_a_500(api_client, catalog, query):
    response = api_client.get(f"/api/products?{query}")
    assert response.status_code in (200, 400), response.content
    if query != "page_size=abc":  # DRF falls back to the default page size
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"


def test_detail_and_its_404s(api_client, catalog):
    product = api_client.get("/api/products/MUG-RED").json()
    assert product["price"] == 900 and product["available"] == 5 and product["in_stock"] is True
    for sku in ("OLD-1", "NOPE", "a" * 65):
        assert api_client.get(f"/api/products/{sku}").status_code == 404


def test_flash_sale_shows(api_client, catalog):
    sale = seed_flash_sale(sku="FLASH-1", stock=10, price=100, name="Flash item")
    shown = api_client.get("/api/products/FLASH-1").json()["flash_sale"]
    assert shown["open"] is True and shown["ends_at"] is None
    assert abs(datetime.fromisoformat(shown["starts_at"]) - sale.starts_at) < timedelta(milliseconds=1)


def test_a_sale_that_opens_changes_the_answer_and_its_etag_then(api_client, catalog):
    """The window's edge, not a change anyone makes, turns the sale open: the
    remembered answer and its ETag change at that moment, no generation moved."""
    from django.utils import timezone

    from core.hotcache import hot_cache
    from tests.helpers import wait_until

    opens = timezone.now() + timedelta(seconds=1.5)
    seed_flash_sale(sku="FLASH-1", stock=10, price=100, name="Flash item", starts_at=opens)
    before = api_client.get("/api/products/FLASH-1")
    assert before.json()["flash_sale"]["open"] is False
    assert abs(datetime.fromisoformat(before.json()["flash_sale"]["starts_at"]) - opens) < timedelta(milliseconds=1)
    generation = hot_cache.ensure_generation()
    assert api_client.get("/api/products/FLASH-1", HTTP_IF_NONE_MATCH=before["ETag"]).status_code == 304
    assert wait_until(lambda: api_client.get("/api/products/FLASH-1").json()["flash_sale"]["open"], 10)
    after = api_client.get("/api/products/FLASH-1", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200 and after["ETag"] != before["ETag"]
    assert timezone.now() >= opens and hot_cache.ensure_generation() == generation


def test_etag_gives_304_and_cache_control_is_short(api_client, catalog, settings):
    first = api_client.get("/api/products")
    etag = first["ETag"]
    assert etag and first["Cache-Control"] == f"public, max-age={settings.CATALOG_MAX_AGE_SECONDS}"
    again = api_client.get("/api/products", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
    assert api_client.get("/api/products?page_size=1", HTTP_IF_NONE_MATCH=etag).status_code == 200
    detail = api_client.get("/api/products/TEE-1")
    assert api_client.get("/api/products/TEE-1", HTTP_IF_NONE_MATCH=detail["ETag"]).status_code == 304


def test_no_sql_once_warm(api_client, catalog):
    api_client.get("/api/products")
    with CaptureQueriesContext(connection) as captured:
        for url in ("/api/products", "/api/products?q=mug&sort=-price&in_stock=true", "/api/products/MUG-RED"):
            assert api_client.get(url).status_code == 200
    assert captured.captured_queries == []


def test_a_price_change_shows_at_once_and_changes_the_etag(api_client, catalog, django_capture_on_commit_callbacks):
    before = api_client.get("/api/products/MUG-RED")
    with django_capture_on_commit_callbacks(execute=True):  # the commit moves the cache generation
        product = Product.objects.get(sku="MUG-RED")
        product.price = 950
        product.save()
    after = api_client.get("/api/products/MUG-RED", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200 and after.json()["price"] == 950


def test_a_stock_change_shows_within_the_hint_age(api_client, catalog):
    assert api_client.get("/api/products/MUG-BLUE").json()["available"] == 0
    receive_stock(sku="MUG-BLUE", quantity=4)
    hot_cache.catalog.stock_read_at -= 60  # the hint's few seconds have passed
    assert api_client.get("/api/products/MUG-BLUE").json()["available"] == 4


def test_the_hand_built_body_is_what_the_serializer_documents(api_client, catalog):
    from inventory.apis import ProductOutputSerializer, product_json
    from inventory.catalog_browse import browse_product

    view = browse_product(sku="MUG-RED")
    assert product_json(view) == ProductOutputSerializer(view).data


def _headers(response) -> dict:
    return {name: value for name, value in response.headers.items() if name != "X-Request-ID"}


@pytest.mark.parametrize("url", ["/api/products?sort=-price", "/api/products/MUG-RED"])
def test_a_remembered_answer_is_the_first_one_again(api_client, catalog, url):
    """The first request renders through DRF; the next are answered from memory
    before DRF's Request (inventory/apis.py): same status, headers and body, HEAD
    included, and a 304 for the ETag."""
    first = api_client.get(url)
    again = api_client.get(url)
    assert again.status_code == first.status_code == 200
    assert _headers(again) == _headers(first) and again.content == first.content
    assert _headers(api_client.head(url)) == _headers(first)
    not_modified = api_client.get(url, HTTP_IF_NONE_MATCH=first["ETag"])
    assert not_modified.status_code == 304 and not_modified["ETag"] == first["ETag"]


def test_a_remembered_answer_skips_drf_but_not_the_generation_check(api_client, catalog, monkeypatch):
    from django_redis import get_redis_connection
    from rest_framework.views import APIView

    from core.hotcache import GENERATION_KEY

    assert api_client.get("/api/products/MUG-RED").json()["price"] == 900
    monkeypatch.setattr(APIView, "initialize_request", lambda *args, **kwargs: pytest.fail("DRF's path taken"))
    assert api_client.get("/api/products/MUG-RED").json()["price"] == 900
    monkeypatch.undo()
    Product.objects.filter(sku="MUG-RED").update(price=950)  # an UPDATE: no signal, as if in another process ...
    get_redis_connection("default").incr(GENERATION_KEY)  # ... whose commit moved the generation
    assert api_client.get("/api/products/MUG-RED").json()["price"] == 950


def test_a_remembered_answer_with_redis_down_is_the_503_envelope(api_client, catalog, monkeypatch):
    from redis.exceptions import ConnectionError as RedisConnectionError

    assert api_client.get("/api/products").status_code == 200

    def unreachable(self):
        raise RedisConnectionError("down")

    monkeypatch.setattr(type(hot_cache), "check_generation", unreachable)
    response = api_client.get("/api/products")
    assert response.status_code == 503 and response.json()["error"]["code"]


def test_the_catalog_views_are_public_and_unthrottled():
    """What lets a remembered answer skip DRF's initial(): nothing to authenticate,
    permit or throttle. A view that needs one of them must not take that path."""
    from rest_framework.permissions import AllowAny

    from inventory.apis import ProductDetailApi, ProductsApi

    for view in (ProductsApi, ProductDetailApi):
        assert view.authentication_classes == [] and view.permission_classes == [AllowAny]
        assert view().get_throttles() == []


def test_a_remembered_answer_is_not_served_when_the_caches_are_dropped_meanwhile(api_client, catalog, monkeypatch):
    """A change committed in this process drops its caches (bump_generation): a
    request that had found the old answer before must not serve it, though the
    check that follows passes (nothing cached: nothing to compare)."""
    from core.hotcache import HotCache

    assert api_client.get("/api/products/MUG-RED").json()["price"] == 900
    Product.objects.filter(sku="MUG-RED").update(price=950)
    check = HotCache.check_generation

    def dropped_first(self):
        hot_cache.clear()  # another thread's commit, between the look-up and the check
        check(self)

    monkeypatch.setattr(HotCache, "check_generation", dropped_first)
    assert api_client.get("/api/products/MUG-RED").json()["price"] == 950
