import math

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import Http404, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path

from core.ratelimit import client_address, hit


class ShopAdminSite(admin.AdminSite):
    site_header = "The shop: staff"
    site_title = "The shop"
    index_title = "Stock, orders and events"
    index_template = "admin/shop_index.html"

    def login(self, request, extra_context=None):
        # The API's login limit, in the same window: one address cannot try passwords
        # here at a rate the API would refuse.
        if request.method == "POST":
            wait = hit(scope="auth", ident=f"ip:{client_address(request)}")
            if wait is not None:
                seconds = max(1, math.ceil(wait))
                return HttpResponse(
                    f"Too many login attempts from your address: try again in {seconds} s.",
                    status=429,
                    content_type="text/plain; charset=utf-8",
                    headers={"Retry-After": str(seconds)},
                )
        return super().login(request, extra_context)

    # This module is loaded with the apps (ShopAdminConfig): models are imported in the methods.

    def get_urls(self):
        import shop.converters  # noqa: F401 - registers <sku:...>

        return [
            path("dashboard/", self.admin_view(self.dashboard_view), name="dashboard"),
            path("flash-sales/<sku:sku>/live/", self.admin_view(self.flash_sale_view), name="flash-sale-live"),
            path("flash-sales/<sku:sku>/live.json", self.admin_view(self.flash_sale_json), name="flash-sale-json"),
            *super().get_urls(),
        ]

    def dashboard_view(self, request):
        from config.dashboard import dashboard

        context = {**self.each_context(request), "title": "Dashboard", **dashboard()}
        return TemplateResponse(request, "admin/dashboard.html", context)

    def flash_sale_view(self, request, sku: str):
        from config.dashboard import live_flash_sale

        sale = live_flash_sale(sku=sku)
        if sale is None:
            raise Http404("No flash sale of this SKU")
        context = {
            **self.each_context(request),
            "title": f"Flash sale {sku}, live",
            "sale": sale,
            "stale_after": settings.QUEUE_STALE_AFTER_SECONDS,
        }
        return TemplateResponse(request, "admin/flash_sale_live.html", context)

    def flash_sale_json(self, request, sku: str):
        from config.dashboard import live_flash_sale

        sale = live_flash_sale(sku=sku)
        if sale is None:
            raise Http404("No flash sale of this SKU")
        return JsonResponse(sale)

    def index(self, request, extra_context=None):
        from outbox.services import backlog

        waiting = backlog()
        context = {
            "outbox_waiting": waiting.waiting,
            "outbox_oldest_age": waiting.oldest_age_seconds,
            **(extra_context or {}),
        }
        return super().index(request, extra_context=context)


class ShopAdminConfig(AdminConfig):
    default_site = "config.admin.ShopAdminSite"
