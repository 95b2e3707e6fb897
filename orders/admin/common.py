"""What the orders admin's modules share: moments, units and refusals as staff
read them, the page of one staff form, money shown as money, links between pages."""

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from core.exceptions import DomainError
from core.formatting import format_line, format_units
from core.money import format_money
from orders.models import Return


def _at(moment) -> str:
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S}"


def _units(lines) -> str:
    """Lines of an event or a refund ([{"sku", "quantity", ...}]) as "2 x A, 1 x B"; a
    received line says its condition ("1 x A restock")."""
    return ", ".join(" ".join(filter(None, [format_line(line), line.get("condition")])) for line in lines or [])


def return_lines(returned: Return) -> str:
    """A return's lines as "2 x A (restock), 1 x B" (its lines and their items prefetched)."""
    return ", ".join(format_units(line.quantity, line.item.product_id, line.condition) for line in returned.lines.all())


def refusal(error: DomainError, currency: str) -> str:
    """A service's refusal as staff read it: its message, and what is left when it says."""
    details = error.details
    if "refundable" in details:
        return f"{error.message} {format_money(details['refundable'], currency)} can still be refunded."
    if "removable" in details:
        return f"{error.message} {details.get('sku')}: {details['removable']} unit(s) can still be removed."
    return error.message


def service_form_page(model_admin, request, *, form, subject: str, back: str, title: str, intro=(), submit: str):
    """A page of one staff form whose save(user=...) calls a service and says what
    it did: on success a message and back to `back`; a refusal (DomainError) is an
    error message above the form again, never a 500."""
    if request.method == "POST" and form.is_valid():
        try:
            done = form.save(user=request.user)
        except DomainError as error:
            model_admin.message_user(request, f"{subject}: {refusal(error, form.currency)}", messages.ERROR)
        else:
            model_admin.message_user(request, f"{subject}: {done}", messages.SUCCESS)
            return HttpResponseRedirect(back)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "subject": subject,
        "back": back,
        "intro": intro,
        "form": form,
        "submit": submit,
    }
    return TemplateResponse(request, "admin/orders/staff_form.html", context)


# --- shown as money ---------------------------------------------------------------------------------------


class AmountShown:
    """A payment's or a refund's amount as money, in its own currency: for lists,
    inlines and view pages, in place of the `amount` and `currency` fields."""

    @admin.display(description="amount", ordering="amount")
    def amount_shown(self, record):
        return format_money(record.amount, record.currency)


class PaymentAmountsShown(AmountShown):
    @admin.display(description="authorized", ordering="amount")
    def amount_shown(self, payment):
        return format_money(payment.amount, payment.currency)

    @admin.display(description="captured")
    def captured_shown(self, payment):
        return format_money(payment.captured_amount, payment.currency)

    @admin.display(description="refunded")
    def refunded_shown(self, payment):
        return format_money(payment.refunded_amount, payment.currency)


class RefundShown(AmountShown):
    @admin.display(description="lines")
    def lines_shown(self, refund):
        """The units it pays back, each with its amount: "2 x A (€19.34)"; "-" for an amount alone."""
        return (
            ", ".join(format_line(line, format_money(line["amount"], refund.currency)) for line in refund.lines) or "-"
        )


SHOWN = {
    "amount": "amount_shown",
    "captured_amount": "captured_shown",
    "refunded_amount": "refunded_shown",
    "lines": "lines_shown",
}


def fields_shown(model) -> list[str]:
    """Every field of a payment or a refund, as its view page shows them (money as money)."""
    names = [field.name for field in model._meta.fields if field.name != "currency"]
    return [SHOWN.get(name, name) for name in names]


def _link(model: str, pk: int, text: str) -> str:
    return format_html('<a href="{}">{}</a>', reverse(f"admin:orders_{model}_change", args=[pk]), text)


class ReturnShown:
    @admin.display(description="lines")
    def lines_shown(self, returned):
        return return_lines(returned)

    @admin.display(description="refund")
    def refund_shown(self, returned):
        refund = returned.refund
        return format_money(refund.amount, refund.currency) if refund else "-"


class PerOrderAction:
    """The order admin's actions that call one service for each selected order."""

    def _each(self, request, queryset, wanted: str | tuple[str, ...], service, done: str):
        wanted = (wanted,) if isinstance(wanted, str) else wanted
        for order in queryset:
            if order.status not in wanted:
                self.message_user(request, f"Order {order.id}: skipped, it is {order.status}.", messages.WARNING)
                continue
            try:
                changed = service(order)
            except DomainError as error:
                self.message_user(request, f"Order {order.id}: {error.message}", messages.ERROR)
                continue
            if changed is False:
                self.message_user(request, f"Order {order.id}: skipped, its status changed.", messages.WARNING)
            else:
                self.message_user(request, f"Order {order.id}: {done}.", messages.SUCCESS)
