"""The stock admin's forms: none of them writes a model; the admin hands what
they cleaned to inventory.services."""

from django import forms
from django.conf import settings

from core.money import minor_units_help
from inventory.models import MAX_UNITS, FlashSale, Stock
from inventory.services.adjustments import OPERATIONS
from inventory.services.flash_sales import RULE_FIELDS

MINOR_UNITS = minor_units_help(settings.SHOP_CURRENCY)


class StockAdjustmentForm(forms.ModelForm):
    """The change form: no stock figure is editable; it asks for an operation,
    and edits the SKU's low-stock threshold."""

    operation = forms.ChoiceField(choices=[("", "No stock change"), *OPERATIONS.items()], required=False)
    quantity = forms.IntegerField(min_value=0, max_value=MAX_UNITS, required=False)
    note = forms.CharField(max_length=200, required=False)

    class Meta:
        model = Stock
        fields = ["low_stock_threshold"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        threshold = self.fields.get("low_stock_threshold")
        if threshold is None:  # a page that only shows the stock has no inputs
            return
        threshold.help_text += f" The setting is {settings.LOW_STOCK_THRESHOLD}."
        # Changed means changed since the form was opened (its hidden initial value),
        # so that a stale form never puts back a threshold another user replaced.
        threshold.show_hidden_initial = True

    def clean(self):
        data = super().clean()
        if data.get("operation") and data.get("quantity") is None:
            self.add_error("quantity", "Give the number of units.")
        elif data.get("operation") in ("receive", "write_off") and data.get("quantity") == 0:
            self.add_error("quantity", "Receive or write off at least one unit.")
        return data


class BulkQuantityForm(forms.Form):
    quantity = forms.IntegerField(min_value=1, max_value=MAX_UNITS)
    note = forms.CharField(max_length=200, required=False)


class CatalogUploadForm(forms.Form):
    file = forms.FileField(help_text=f"CSV with the columns sku,name,price,stock (price in {MINOR_UNITS})")


class FlashSaleForm(forms.ModelForm):
    """A sale's rule, and on adding (or to re-seed) its units: validated as the
    model is, saved through the flash-sale services (which set the gate too),
    never by the model form."""

    stock = forms.IntegerField(
        min_value=0,
        max_value=MAX_UNITS,
        required=False,
        help_text="Units on sale, in the database and the gate. Required to open a sale; "
        "on a running sale it re-seeds (clears the per-customer counts); blank keeps them.",
    )

    class Meta:
        model = FlashSale
        fields = ["product", "stock", "sale_price", "per_customer_limit", "mode", "starts_at", "ends_at"]
        help_texts = {
            "starts_at": "Checkouts are admitted from then on (Redis's clock: no process runs at the edges).",
            "ends_at": "Checkouts are refused from then on. Blank: no end.",
            "sale_price": f"What a unit costs inside the window, in {MINOR_UNITS}. Blank: the catalog price.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in RULE_FIELDS:  # changed means changed since the form was opened (its hidden initial value)
            if name in self.fields:  # a page that only shows the sale has none
                self.fields[name].show_hidden_initial = True

    def clean(self):
        data = super().clean()
        if self.instance._state.adding and data.get("stock") is None:
            self.add_error("stock", "Give the units the sale opens with.")
        starts, ends = data.get("starts_at"), data.get("ends_at")
        if starts and ends and ends <= starts:
            self.add_error("ends_at", "A sale ends after it starts.")
        return data
