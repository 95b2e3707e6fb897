from django.urls import path

from cart.apis import CartApi, CartItemApi

urlpatterns = [
    path("cart", CartApi.as_view(), name="cart"),
    path("cart/items/<str:sku>", CartItemApi.as_view(), name="cart-item"),
]
