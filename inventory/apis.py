from dataclasses import asdict
from typing import NamedTuple

from django.conf import settings
from django.http import HttpResponse
from django.utils.cache import get_conditional_response, patch_cache_control, set_response_etag
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from redis.exceptions import RedisError
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import AllowAny

from core.hotcache import HotCacheApiView, StaleCache, hot_cache
from core.openapi import ERRORS, page_serializer
from inventory.catalog_browse import SORTS, answer_in_memory, answers, browse_product, browse_products, with_stock
from shop.models import SKU_PATTERN


class SaleWindowSerializer(serializers.Serializer):
    class Meta:
        ref_name = "FlashSaleWindow"

    starts_at = serializers.DateTimeField(help_text="Checkouts are admitted from then on")
    ends_at = serializers.DateTimeField(allow_null=True, help_text="Refused from then on; null: no end")
    open = serializers.BooleanField(help_text="Admitting checkouts now")
    sale_price = serializers.IntegerField(
        allow_null=True, help_text="Minor units a unit costs inside the window; null: the catalog price"
    )


class ProductOutputSerializer(serializers.Serializer):
    class Meta:
        ref_name = "Product"

    sku = serializers.CharField(source="product.sku")
    name = serializers.CharField(source="product.name")
    description = serializers.CharField(source="product.description")
    image_url = serializers.CharField(source="product.image_url")
    price = serializers.IntegerField(source="product.price", help_text="Minor units of `currency`")
    currency = serializers.SerializerMethodField()
    available = serializers.IntegerField(help_text="A hint, a few seconds old at most: checkout decides")
    in_stock = serializers.SerializerMethodField()
    flash_sale = SaleWindowSerializer(
        allow_null=True, help_text="The product's flash sale (limited units, first come first served), or null"
    )

    def get_currency(self, view) -> str:
        return settings.SHOP_CURRENCY

    def get_in_stock(self, view) -> bool:
        return view.available > 0


def product_json(view) -> dict:
    """The body ProductOutputSerializer documents, built directly: a DRF serializer
    per product was most of a catalog page's CPU (bench/catalog.py); tests check both agree."""
    p = view.product
    return {
        "sku": p.sku,
        "name": p.name,
        "description": p.description,
        "image_url": p.image_url,
        "price": p.price,
        "currency": settings.SHOP_CURRENCY,
        "available": view.available,
        "in_stock": view.available > 0,
        "flash_sale": view.flash_sale and asdict(view.flash_sale),
    }


ProductPageSerializer = page_serializer(ProductOutputSerializer, "ProductPage")


class ProductFilterSerializer(serializers.Serializer):
    q = serializers.CharField(required=False, max_length=100, default="", help_text="In the SKU or name, any case")
    in_stock = serializers.BooleanField(required=False, default=False)
    sort = serializers.ChoiceField(choices=sorted(SORTS), required=False, default="sku")


class CatalogPagination(PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100


class Answer(NamedTuple):
    """A rendered 200 and its ETag, as CatalogApiView remembers them."""

    body: bytes
    etag: str

    def response(self) -> HttpResponse:
        response = HttpResponse(self.body, content_type="application/json")
        response.headers["ETag"] = self.etag
        return response


class CatalogApiView(HotCacheApiView):
    """Public and cacheable: no token, an ETag (If-None-Match -> 304) and a
    short max-age, so that `available` stays useful."""

    authentication_classes = []
    permission_classes = [AllowAny]

    def dispatch(self, request, *args, **kwargs):
        # A page already rendered, its generation checked, is answered without DRF's
        # Request, initial() and exception handling: they were most of a warm
        # request's CPU (bench/catalog.py). They have nothing to do here: no
        # authentication, AllowAny, no throttle (tests/inventory/test_catalog_api.py).
        generation = hot_cache.generation
        if request.method in ("GET", "HEAD") and generation and (answer := answer_in_memory(request.get_full_path())):
            try:
                hot_cache.check_generation()
            except (StaleCache, RedisError):
                pass  # DRF's path asks again and answers it: the retry from the database, or the 503
            else:
                if hot_cache.generation == generation:  # else dropped meanwhile (a change made here): not the answer
                    self.headers = self.default_response_headers
                    return self.finalize_response(request, answer.response())
        return super().dispatch(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if request.method not in ("GET", "HEAD") or response.status_code != 200:
            return response  # OPTIONS: DRF's metadata, not a page of the catalog
        patch_cache_control(response, public=True, max_age=settings.CATALOG_MAX_AGE_SECONDS)
        return get_conditional_response(request, etag=response.headers["ETag"], response=response)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        hot_cache.check_generation()  # a product changed elsewhere: served from the database

    def remembered(self, request, build) -> HttpResponse:
        """The JSON of build(), rendered once per URL, with its ETag, for as long as
        the catalog's data stands (inventory/catalog_browse.py answers()): a page
        asked for again is a dict lookup (bench/README.md, catalog)."""
        memo, key = answers(), request.get_full_path()
        answer = memo.get(key)
        if answer is None:
            response = HttpResponse(self._json.render(build()), content_type="application/json")
            set_response_etag(response)
            answer = memo[key] = Answer(response.content, response.headers["ETag"])
        return answer.response()


class ProductsApi(CatalogApiView):
    @extend_schema(
        operation_id="products_list",
        parameters=[
            ProductFilterSerializer,
            OpenApiParameter("page", OpenApiTypes.INT, description="1, 2, ..."),
            OpenApiParameter("page_size", OpenApiTypes.INT, description="20 unless given; at most 100"),
        ],
        responses={200: ProductPageSerializer, 304: None, **ERRORS(400, 404, 503)},
        description="Active products, paginated. 404 for a page past the last.",
    )
    def get(self, request):
        return self.remembered(request, lambda: self.page(request))

    def page(self, request) -> dict:
        filters = ProductFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        paginator = CatalogPagination()
        page = paginator.paginate_queryset(browse_products(**filters.validated_data), request, view=self)
        return paginator.get_paginated_response([product_json(view) for view in with_stock(page)]).data


SKU = OpenApiParameter("sku", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=SKU_PATTERN)


class ProductDetailApi(CatalogApiView):
    @extend_schema(parameters=[SKU], responses={200: ProductOutputSerializer, 304: None, **ERRORS(404, 503)})
    def get(self, request, sku: str):
        return self.remembered(request, lambda: product_json(self.product(sku)))

    def product(self, sku: str):
        product = browse_product(sku=sku)
        if product is None:
            raise NotFound("No product with this SKU is on sale.")
        return product
