from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.db.models import Count, Min
from django.utils import timezone


class ReadOnlyAdmin(admin.ModelAdmin):
    """A record of what happened (ledger, payments, events): staff look, never edit."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        return self.fields


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
