from django.urls import path

from orders.apis import OrderDetailApi, OrdersApi

urlpatterns = [
    path("orders", OrdersApi.as_view(), name="orders"),
    path("orders/<int:order_id>", OrderDetailApi.as_view(), name="order-detail"),
]
