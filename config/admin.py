import math

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpResponse
from django.utils import timezone

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

    def index(self, request, extra_context=None):
        from outbox.services import backlog

        count, oldest = backlog()
        age = (timezone.now() - oldest).total_seconds() if oldest else None
        context = {"outbox_waiting": count, "outbox_oldest_age": age, **(extra_context or {})}
        return super().index(request, extra_context=context)


class ShopAdminConfig(AdminConfig):
    default_site = "config.admin.ShopAdminSite"
