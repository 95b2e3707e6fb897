"""The forms staff act through: each calls one service."""

from django import forms

from core.formatting import format_units
from core.money import format_money, minor_units_help
from orders.admin.common import _units, return_lines
from orders.models import Order, Refund, Return, ReturnCondition
from orders.services import receive_return, refund_goodwill, remove_order_lines
from shop.models import MAX_PRICE


class GoodwillRefundForm(forms.Form):
    amount = forms.IntegerField(min_value=1, max_value=MAX_PRICE)
    note = forms.CharField(max_length=200, help_text="Why the money goes back (kept with the refund).")

    def __init__(self, *args, order: Order, **kwargs):
        super().__init__(*args, **kwargs)
        self.order, self.currency = order, order.currency
        self.fields["amount"].help_text = f"In {minor_units_help(order.currency)}."

    def save(self, *, user) -> str:
        refund = refund_goodwill(
            order_id=self.order.id, amount=self.cleaned_data["amount"], note=self.cleaned_data["note"], user=user
        )
        return f"goodwill refund of {format_money(refund.amount, refund.currency)} requested."


class RemoveLinesForm(forms.Form):
    """Units to take off each line of a paid order (0: none); what may go is the service's to say."""

    def __init__(self, *args, order: Order, **kwargs):
        super().__init__(*args, **kwargs)
        self.order, self.currency = order, order.currency
        self.items = list(order.items.order_by("id"))
        for item in self.items:
            price = format_money(item.unit_price, order.currency)
            self.fields[f"units_{item.id}"] = forms.IntegerField(
                label=f"{item.product_id}: {item.name}",
                min_value=0,
                max_value=item.quantity,
                initial=0,
                required=False,  # blank: none of the line
                help_text=f"{item.quantity} ordered at {price}; {item.cancelled} removed and {item.refunded} "
                "refunded already.",
            )

    def lines(self) -> dict[str, int]:
        return {
            item.product_id: self.cleaned_data[f"units_{item.id}"]
            for item in self.items
            if self.cleaned_data.get(f"units_{item.id}")
        }

    def clean(self):
        data = super().clean()
        if not self.errors and not self.lines():
            raise forms.ValidationError("Give the units to remove of at least one line.")
        return data

    def save(self, *, user) -> str:
        lines, before = self.lines(), self.order.total_amount
        last_refund = self.order.refunds.order_by("-id").values_list("id", flat=True).first() or 0
        order = remove_order_lines(order_id=self.order.id, lines=lines, user=user)
        removed = _units({"sku": sku, "quantity": units} for sku, units in sorted(lines.items()))
        said = (
            f"removed {removed} ({format_money(before - order.total_amount, order.currency)} off), "
            f"the total is now {format_money(order.total_amount, order.currency)}"
        )
        refund = order.refunds.filter(id__gt=last_refund, reason=Refund.Reason.LINES_CANCELLED).first()
        if refund is not None:
            said += f"; a refund of {format_money(refund.amount, refund.currency)} requested"
        return f"{said}."


CONDITIONS = [
    ("", "Choose"),
    (ReturnCondition.RESTOCK, "Restock (back on sale)"),
    (ReturnCondition.DAMAGED, "Damaged (written off)"),
]


class ReceiveReturnForm(forms.Form):
    """The parcel as staff found it: a condition for each line of the return."""

    def __init__(self, *args, returned: Return, **kwargs):
        super().__init__(*args, **kwargs)
        self.returned, self.currency = returned, returned.order.currency
        self.lines = list(returned.lines.all())  # prefetched with their items, in id order (the admin's queryset)
        for line in self.lines:
            self.fields[f"line_{line.id}"] = forms.ChoiceField(
                label=format_units(line.quantity, line.item.product_id), choices=CONDITIONS, help_text=line.item.name
            )

    def save(self, *, user) -> str:
        conditions = {line.item.product_id: self.cleaned_data[f"line_{line.id}"] for line in self.lines}
        received = receive_return(return_id=self.returned.id, conditions=conditions, user=user)
        refund = received.refund
        money = (
            f"refund of {format_money(refund.amount, refund.currency)} requested"
            if refund
            else "nothing to refund (no money was taken, or earlier refunds gave it all back)"
        )
        return f"received {return_lines(received)}; {money}."
