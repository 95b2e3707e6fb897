from django.urls import path

import shop.converters  # noqa: F401 - registers <sku:...>
from cart.apis import CartApi, CartItemApi, CartShippingApi, CartVoucherApi, ShippingMethodsApi

urlpatterns = [
    path("cart", CartApi.as_view(), name="cart"),
    path("cart/items/<sku:sku>", CartItemApi.as_view(), name="cart-item"),
    path("cart/voucher", CartVoucherApi.as_view(), name="cart-voucher"),
    path("cart/shipping-method", CartShippingApi.as_view(), name="cart-shipping-method"),
    path("shipping-methods", ShippingMethodsApi.as_view(), name="shipping-methods"),
]
