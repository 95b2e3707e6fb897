from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminPasswordChangeForm

from core.admin import ReadOnlyAdmin
from shop.models import LoyaltyEntry, Product
from shop.services import set_password


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "price", "is_active", "updated_at"]
    list_filter = ["is_active"]
    search_fields = ["sku", "name"]
    readonly_fields = ["created_at", "updated_at"]
    ordering = ["sku"]

    def get_readonly_fields(self, request, obj=None):
        # The SKU is the key orders and stock refer to: set once.
        return [*self.readonly_fields, "sku"] if obj else self.readonly_fields

    def get_fields(self, request, obj=None):
        fields = ["sku", "name", "price", "is_active", "description", "image_url"]
        return [*fields, "created_at", "updated_at"] if obj else fields


@admin.register(LoyaltyEntry)
class LoyaltyEntryAdmin(ReadOnlyAdmin):
    list_display = ["customer", "order_id", "points", "reason", "created_at"]
    list_filter = ["reason"]
    search_fields = ["customer__username", "=order_id"]
    list_select_related = ["customer"]


class UserPasswordChangeForm(AdminPasswordChangeForm):
    """The admin's "change password" form (validated as Django's): saved by the
    service, so the user's tokens are revoked with it. It always saves."""

    def save(self, commit=True):
        password = self.cleaned_data["password1"] if self.cleaned_data["set_usable_password"] else None
        return set_password(user=self.user, password=password)


# Django's UserAdmin (registered by django.contrib.auth, an app listed before
# shop), with the password changed through shop's service. Its add form makes a
# new user (no tokens yet) and its change form cannot set a password.
admin.site.unregister(get_user_model())


@admin.register(get_user_model())
class ShopUserAdmin(UserAdmin):
    change_password_form = UserPasswordChangeForm
