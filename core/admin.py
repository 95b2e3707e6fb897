"""Admin base classes the apps share."""

from django.contrib import admin


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
