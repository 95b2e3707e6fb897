from django.urls import path

import shop.converters  # noqa: F401 - registers <sku:...>
from inventory.apis import ProductDetailApi, ProductsApi

urlpatterns = [
    path("products", ProductsApi.as_view(), name="products"),
    path("products/<sku:sku>", ProductDetailApi.as_view(), name="product-detail"),
]
