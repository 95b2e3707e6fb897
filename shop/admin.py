import re
from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminPasswordChangeForm
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import localize
from django.utils.html import format_html
from django_countries import countries

from core.admin import ReadOnlyAdmin
from core.locks import for_update
from core.money import format_money, minor_units_help
from shop.models import (
    STANDARD_TAX_CLASS,
    LoyaltyEntry,
    Product,
    Promotion,
    ShippingMethod,
    ShippingRateBand,
    ShippingZone,
    TaxClass,
    TaxRate,
    VoucherRedemption,
)
from shop.promotions import end_promotions, normalize_code, save_promotion
from shop.services import set_password

MINOR_UNITS = minor_units_help(settings.SHOP_CURRENCY)


def _money(amount: int) -> str:
    """Catalog amounts (prices, promotions) are in the shop's one currency."""
    return format_money(amount, settings.SHOP_CURRENCY)


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "price_shown", "weight_grams", "tax_class", "is_active", "updated_at"]
    list_filter = ["is_active", "tax_class"]
    list_select_related = ["tax_class"]
    search_fields = ["sku", "name"]
    readonly_fields = ["price_shown", "created_at", "updated_at"]
    ordering = ["sku"]

    def get_readonly_fields(self, request, obj=None):
        # The SKU is the key orders and stock refer to: set once.
        return [*self.readonly_fields, "sku"] if obj else self.readonly_fields

    def get_fields(self, request, obj=None):
        # The price is typed in minor units; a page that only shows it shows money.
        price = "price" if obj is None or self.has_change_permission(request, obj) else "price_shown"
        fields = ["sku", "name", price, "weight_grams", "tax_class", "is_active", "description", "image_url"]
        return [*fields, "created_at", "updated_at"] if obj else fields

    def get_form(self, request, obj=None, **kwargs):
        help_texts = {
            "price": f"In {MINOR_UNITS}.",
            "weight_grams": "Grams, what shipping by weight counts; 0 for goods that do not ship.",
            "tax_class": "Its tax rate in each country is the class's (Tax rates).",
        }
        return super().get_form(request, obj, help_texts=help_texts, **kwargs)

    @admin.display(description="price", ordering="price")
    def price_shown(self, product):
        return _money(product.price)


@admin.register(LoyaltyEntry)
class LoyaltyEntryAdmin(ReadOnlyAdmin):
    list_display = ["customer", "order_id", "points", "reason", "created_at"]
    list_filter = ["reason"]
    search_fields = ["customer__username", "=order_id"]
    list_select_related = ["customer"]


class PromotionForm(forms.ModelForm):
    """The promotion's fields as staff set them; the table's CHECKs are checked too
    (ModelForm validates model constraints) and answered as form errors."""

    class Meta:
        model = Promotion
        fields = [
            "name",
            "kind",
            "value",
            "scope",
            "products",
            "min_subtotal",
            "starts_at",
            "ends_at",
            "code",
            "usage_limit",
            "per_customer_limit",
        ]
        help_texts = {
            "value": (
                f"Percent (1-100) for a percentage or a shipping discount (100: free shipping); "
                f"for an amount, {MINOR_UNITS}."
            ),
            "products": "The SKUs a promotion of the listed SKUs applies to (ignored for the whole cart).",
            "min_subtotal": f"In {MINOR_UNITS}. Applies only when the cart's subtotal at catalog prices reaches it.",
            "ends_at": "Blank: open-ended.",
            "code": "Blank: automatic. With a code it is a voucher (letters, digits, dashes; any case).",
            "usage_limit": "Vouchers only. Redemptions in all; blank: no limit.",
            "per_customer_limit": "Vouchers only (ignored without a code). Redemptions per shopper; blank: no limit.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.initial.setdefault("per_customer_limit", 1)  # a voucher's default: once per shopper
        for field in self.fields.values():  # changed means changed since the form was opened
            field.show_hidden_initial = True
        if "kind" in self.fields:  # a sale price is a flash sale's, set with the sale (inventory)
            kind = self.fields["kind"]
            kind.choices = [choice for choice in kind.choices if choice[0] != Promotion.Kind.SALE_PRICE]

    def clean_code(self):
        code = normalize_code(self.cleaned_data.get("code") or "")
        return code or None

    def clean(self):
        cleaned = super().clean()
        # Not a form field, so its CHECKs are not validated by the form: here. Read under a row lock
        # (the admin's change view is one transaction): a redemption cannot land between this
        # check and the save and make the save break promotion_uses_within_limit.
        uses = (
            for_update(Promotion.objects.filter(pk=self.instance.pk)).values_list("uses", flat=True).first()
            if self.instance.pk is not None
            else 0
        ) or 0
        if not cleaned.get("code"):
            if cleaned.get("usage_limit") is not None:
                self.add_error("usage_limit", "Only a voucher (a promotion with a code) has a usage limit.")
            if uses:
                self.add_error("code", f"Redeemed {uses} times: a voucher with uses keeps a code.")
            cleaned["per_customer_limit"] = None
        elif cleaned.get("usage_limit") is not None and cleaned["usage_limit"] < uses:
            self.add_error("usage_limit", f"Redeemed {uses} times already: the limit cannot be below that.")
        if cleaned.get("scope") == Promotion.Scope.CART:
            cleaned["products"] = Product.objects.none()
        elif cleaned.get("scope") == Promotion.Scope.SKUS and not cleaned.get("products"):
            self.add_error("products", "List the SKUs the promotion applies to.")
        return cleaned


def _prices_a_flash_sale(promotion) -> bool:
    return promotion is not None and promotion.kind == Promotion.Kind.SALE_PRICE


@admin.register(Promotion)
class PromotionAdmin(admin.ModelAdmin):
    """Staff create, edit, end and inspect promotions. `uses` is the redemption
    services' alone: shown, never written by the form (shop/promotions.py)."""

    form = PromotionForm
    list_display = ["name", "discount", "minimum", "window", "code", "uses", "remaining", "active_now"]
    list_filter = ["kind", "scope"]
    search_fields = ["name", "code"]
    autocomplete_fields = ["products"]
    readonly_fields = ["discount", "minimum", "uses", "remaining", "redemptions_so_far", "created_at", "updated_at"]
    actions = ["end_now"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "value", "scope", "products", "min_subtotal"]}),
        ("Window", {"fields": ["starts_at", "ends_at"]}),
        (
            "Voucher",
            {"fields": ["code", "usage_limit", "per_customer_limit", "uses", "remaining", "redemptions_so_far"]},
        ),
        (None, {"fields": ["created_at", "updated_at"]}),
    ]
    REDEMPTIONS_SHOWN = 50

    def has_change_permission(self, request, obj=None):
        # A flash sale's price is the sale's (inventory keeps it in step): edited with the sale.
        return super().has_change_permission(request, obj) and not _prices_a_flash_sale(obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and not _prices_a_flash_sale(obj)

    def get_fieldsets(self, request, obj=None):
        if obj is None or self.has_change_permission(request, obj):
            return self.fieldsets
        # A page that only shows the promotion shows its amounts as money, not the form's integers.
        shown = {"value": "discount", "min_subtotal": "minimum"}
        return [(name, {"fields": [shown.get(f, f) for f in opts["fields"]]}) for name, opts in self.fieldsets]

    def save_model(self, request, obj, form, change):
        save_promotion(promotion=obj, changed=form.changed_data if change else None)

    def save_related(self, request, form, formsets, change):
        if not change or "products" in form.changed_data:  # else a stale form would put old SKUs back
            super().save_related(request, form, formsets, change)

    @admin.display(description="discount")
    def discount(self, promotion):
        # Promotion.discount_label, with an amount shown as money.
        if promotion.kind in (Promotion.Kind.PERCENT, Promotion.Kind.FREE_SHIPPING):
            return promotion.discount_label
        money = _money(promotion.value)
        if promotion.kind == Promotion.Kind.SALE_PRICE:
            return f"each unit at {money}"
        return f"{money} off {'each unit' if promotion.kind == Promotion.Kind.AMOUNT else 'the cart'}"

    @admin.display(description="minimum subtotal", ordering="min_subtotal")
    def minimum(self, promotion):
        return _money(promotion.min_subtotal) if promotion.min_subtotal else "-"

    @admin.display(description="window")
    def window(self, promotion):
        ends = localize(timezone.localtime(promotion.ends_at)) if promotion.ends_at else "open-ended"
        return f"{localize(timezone.localtime(promotion.starts_at))} – {ends}"

    @admin.display(description="remaining uses")
    def remaining(self, promotion):
        if promotion.code is None:
            return "-"
        return "no limit" if promotion.usage_limit is None else promotion.remaining_uses

    @admin.display(description="active now", boolean=True)
    def active_now(self, promotion):
        return promotion.is_active_at(timezone.now())

    @admin.display(description="redemptions")
    def redemptions_so_far(self, promotion):
        if promotion.pk is None:
            return "-"
        redemptions = VoucherRedemption.objects.filter(voucher=promotion)
        count = redemptions.count()
        if not count:
            return "none"
        orders = redemptions.order_by("-id").values_list("order_id", flat=True)[: self.REDEMPTIONS_SHOWN]
        more = f" (the newest {self.REDEMPTIONS_SHOWN})" if count > self.REDEMPTIONS_SHOWN else ""
        url = reverse("admin:shop_voucherredemption_changelist") + f"?voucher__id__exact={promotion.pk}"
        return format_html(
            '{} so far; orders{}: {} · <a href="{}">all redemptions</a>',
            count,
            more,
            ", ".join(str(order_id) for order_id in orders),
            url,
        )

    @admin.action(description="End selected promotions now", permissions=["change"])
    def end_now(self, request, queryset):
        ids = list(queryset.values_list("pk", flat=True))
        ended = end_promotions(promotion_ids=ids)
        self.message_user(request, f"{ended} promotion(s) ended.", messages.SUCCESS)
        if ended < len(ids):
            self.message_user(
                request,
                f"{len(ids) - ended} not ended: already over, or not started yet (delete one that has not "
                "started, or move its window).",
                messages.WARNING,
            )


@admin.register(VoucherRedemption)
class VoucherRedemptionAdmin(ReadOnlyAdmin):
    list_display = ["voucher", "order_id", "customer", "created_at"]
    search_fields = ["=order_id", "voucher__code", "customer__username"]
    list_select_related = ["voucher", "customer"]
    list_filter = [("voucher", admin.RelatedOnlyFieldListFilter)]


# --- tax and shipping (shop/totals.py prices with them) -------------------------------------------


def _unknown_country(code: str) -> bool:
    """Whether `code` is no ISO 3166-1 alpha-2 code: django-countries' keys are those alone
    ("GBR", "826" and "UK" are not among them)."""
    return code not in countries


class CountryCodesField(forms.CharField):
    """ISO 3166-1 alpha-2 codes typed as a list ("GB, IE" or "gb ie"), stored upper-cased, once each."""

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value):
        text = super().to_python(value)
        return list(dict.fromkeys(code.upper() for code in re.split(r"[\s,;]+", text) if code))

    def validate(self, value):
        super().validate(value)  # an empty list: "This field is required."
        if unknown := [code for code in value if _unknown_country(code)]:
            raise ValidationError(
                f"Not ISO 3166-1 alpha-2 country codes: {', '.join(unknown)} (two letters, e.g. GB, IE, DE)."
            )


@admin.register(TaxClass)
class TaxClassAdmin(admin.ModelAdmin):
    list_display = ["code", "name"]
    search_fields = ["code", "name"]

    def get_readonly_fields(self, request, obj=None):
        # The code is the key products and rates refer to: set once.
        return ["code"] if obj else []

    def has_delete_permission(self, request, obj=None):
        # A new product is `standard` unless told otherwise (the column's default): that class stays.
        return super().has_delete_permission(request, obj) and (obj is None or obj.code != STANDARD_TAX_CLASS)


class TaxRateForm(forms.ModelForm):
    class Meta:
        model = TaxRate
        fields = ["country", "tax_class", "rate", "valid_from", "source"]
        help_texts = {
            "country": "ISO 3166-1 alpha-2 code, e.g. GB, DE.",
            "rate": "Basis points: 2000 is 20%, 550 is 5.5%, 0 for a zero rate.",
            "valid_from": "In force from this day until the next rate's for the same country and class.",
            "source": "Where the rate was read, and when.",
        }

    def clean_country(self):
        code = self.cleaned_data["country"].strip().upper()
        if _unknown_country(code):
            raise ValidationError(f"{code!r} is not an ISO 3166-1 alpha-2 country code (e.g. GB, DE).")
        return code


def _percent(basis_points: int) -> str:
    return f"{Decimal(basis_points) / 100:f}%"  # exact: 550 -> "5.5%", 2000 -> "20%"


@admin.register(TaxRate)
class TaxRateAdmin(admin.ModelAdmin):
    """`manage.py load_tax_rates` loads a whole table (shop/data/README.md); this edits one rate."""

    form = TaxRateForm
    list_display = ["country", "tax_class", "rate", "percent", "valid_from", "source"]
    list_filter = ["country", "tax_class"]
    list_select_related = ["tax_class"]
    search_fields = ["=country", "source"]
    date_hierarchy = "valid_from"

    @admin.display(description="percent", ordering="rate")
    def percent(self, tax_rate):
        return _percent(tax_rate.rate)


class ShippingZoneForm(forms.ModelForm):
    countries = CountryCodesField(help_text="ISO 3166-1 alpha-2 codes, separated by commas or spaces: GB, IE")

    class Meta:
        model = ShippingZone
        fields = ["name", "countries"]


@admin.register(ShippingZone)
class ShippingZoneAdmin(admin.ModelAdmin):
    form = ShippingZoneForm
    list_display = ["name", "country_list", "methods"]
    search_fields = ["name"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(method_count=Count("methods"))

    @admin.display(description="countries")
    def country_list(self, zone):
        return ", ".join(zone.countries)

    @admin.display(description="methods", ordering="method_count")
    def methods(self, zone):
        return zone.method_count


class ShippingRateBandFormSet(forms.BaseInlineFormSet):
    """A method priced by weight cannot price a cart without a band: it needs one.
    A flat method ignores its bands (kept, so that switching back loses nothing)."""

    def clean(self):
        super().clean()
        if self.instance.pricing != ShippingMethod.Pricing.WEIGHT:
            return
        bands = [
            form
            for form in self.forms
            if getattr(form, "cleaned_data", None) and not (self.can_delete and self._should_delete_form(form))
        ]
        if not bands:
            raise ValidationError(
                "A method priced by weight needs at least one weight band (up to how many grams, at what price): "
                "add one, or price the method flat."
            )


class ShippingRateBandInline(admin.TabularInline):
    model = ShippingRateBand
    formset = ShippingRateBandFormSet
    fields = ["up_to_grams", "price"]
    extra = 1
    verbose_name = "weight band"
    verbose_name_plural = "weight bands (pricing by weight only: the lightest band that holds the cart prices it)"

    def get_formset(self, request, obj=None, **kwargs):
        help_texts = {"up_to_grams": "Carts up to this weight, in grams.", "price": f"In {MINOR_UNITS}."}
        return super().get_formset(request, obj, help_texts=help_texts, **kwargs)


@admin.register(ShippingMethod)
class ShippingMethodAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "zone", "pricing", "price_shown", "free_over_shown", "days", "is_active"]
    list_filter = ["is_active", "pricing", "zone"]
    list_select_related = ["zone"]
    search_fields = ["code", "name"]
    inlines = [ShippingRateBandInline]
    fields = ["code", "name", "zone", "pricing", "price", "free_over", "min_days", "max_days", "is_active"]

    def get_readonly_fields(self, request, obj=None):
        # Carts name their method by its code: set once.
        return ["code"] if obj else []

    def get_form(self, request, obj=None, **kwargs):
        help_texts = {
            "price": f"Flat pricing: in {MINOR_UNITS}. Ignored when priced by weight (the bands price it).",
            "free_over": f"In {MINOR_UNITS}. Free when the goods (after discounts) cost at least this; "
            "blank: never free.",
            "min_days": "Delivery estimate, shortest, in days.",
            "max_days": "Delivery estimate, longest, in days (at least the shortest).",
        }
        return super().get_form(request, obj, help_texts=help_texts, **kwargs)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(band_count=Count("bands"))

    @admin.display(description="price", ordering="price")
    def price_shown(self, method):
        if method.pricing == ShippingMethod.Pricing.WEIGHT:
            return f"by weight ({method.band_count} band{'s' if method.band_count != 1 else ''})"
        return _money(method.price)

    @admin.display(description="free over", ordering="free_over")
    def free_over_shown(self, method):
        return "-" if method.free_over is None else _money(method.free_over)

    @admin.display(description="days")
    def days(self, method):
        return f"{method.min_days}" if method.min_days == method.max_days else f"{method.min_days}-{method.max_days}"


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
