from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.db.models import Count, Min
from django.utils import timezone


class ShopAdminSite(admin.AdminSite):
    site_header = "The shop: staff"
    site_title = "The shop"
    index_title = "Stock, orders and events"
    index_template = "admin/shop_index.html"

    def index(self, request, extra_context=None):
        from outbox.models import OutboxEvent

        waiting = OutboxEvent.objects.filter(published_at__isnull=True).aggregate(
            count=Count("id"), oldest=Min("created_at")
        )
        age = (timezone.now() - waiting["oldest"]).total_seconds() if waiting["oldest"] else None
        context = {"outbox_waiting": waiting["count"], "outbox_oldest_age": age, **(extra_context or {})}
        return super().index(request, extra_context=context)


class ShopAdminConfig(AdminConfig):
    default_site = "config.admin.ShopAdminSite"
