from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
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
        from outbox.services import backlog

        count, oldest = backlog()
        age = (timezone.now() - oldest).total_seconds() if oldest else None
        context = {"outbox_waiting": count, "outbox_oldest_age": age, **(extra_context or {})}
        return super().index(request, extra_context=context)


class ShopAdminConfig(AdminConfig):
    default_site = "config.admin.ShopAdminSite"
