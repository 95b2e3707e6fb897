"""Returns: staff approve or reject them, then receive the parcel."""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.urls import path, reverse

from core.exceptions import DomainError
from core.money import format_money
from orders.admin.common import ReturnShown, _link, return_lines, service_form_page
from orders.admin.forms import ReceiveReturnForm
from orders.models import Return
from orders.services import approve_return, reject_return
from orders.services.returns import LINES_WITH_ITEMS


@admin.register(Return)
class ReturnAdmin(ReturnShown, admin.ModelAdmin):
    """Returns are part of their order: whoever may view orders sees them, whoever
    may change orders decides and receives them (services, through the actions and
    the receive page); no field is ever edited."""

    list_display = ["id", "order_link", "status", "lines_shown", "created_at", "refund_shown"]
    list_filter = ["status"]
    search_fields = ["=id", "=order__id"]
    list_select_related = ["refund"]
    fields = readonly_fields = [
        "order_link",
        "status",
        "reason",
        "lines_shown",
        "created_at",
        "decided_at",
        "decided_by",
        "received_at",
        "refund_link",
    ]
    actions = ["approve", "reject"]
    change_form_template = "admin/orders/change_form_with_tools.html"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related(LINES_WITH_ITEMS)

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("orders.view_order") or request.user.has_perm("orders.change_order")

    def has_change_permission(self, request, obj=None):
        # The actions and the receive page need it; a return's own page stays read-only.
        return obj is None and request.user.has_perm("orders.change_order")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        receive = self.admin_site.admin_view(self.receive_view)
        return [path("<path:object_id>/receive/", receive, name="orders_return_receive"), *super().get_urls()]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        receivable = obj is not None and obj.status in (Return.Status.REQUESTED, Return.Status.APPROVED)
        context["staff_tools"] = (
            [("Receive", reverse("admin:orders_return_receive", args=[obj.pk]))]
            if receivable and self.has_change_permission(request)
            else []
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def receive_view(self, request, object_id):
        if not self.has_change_permission(request):
            raise PermissionDenied
        returned = self.get_queryset(request).select_related("order").filter(pk=unquote(object_id)).first()
        if returned is None:
            raise Http404("No such return")
        back = reverse("admin:orders_return_change", args=[returned.pk])
        if returned.status not in (Return.Status.REQUESTED, Return.Status.APPROVED):
            self.message_user(
                request,
                f"Return {returned.id}: only a requested or approved return can be "
                f"received; it is {returned.get_status_display()}.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        form = ReceiveReturnForm(request.POST if request.method == "POST" else None, returned=returned)
        return service_form_page(
            self,
            request,
            form=form,
            subject=f"Return {returned.id}",
            back=back,
            title=f"Receive return {returned.id} of order {returned.order_id}",
            submit="Receive",
            intro=[
                f"{returned.get_status_display()}: {return_lines(returned)}"
                + (f" (“{returned.reason}”)." if returned.reason else "."),
                "Each line back on sale (restock) or written off (damaged), both through the stock ledger; "
                "the units received are refunded at the price paid.",
            ],
        )

    @admin.display(description="order", ordering="order_id")
    def order_link(self, returned):
        return _link("order", returned.order_id, f"Order {returned.order_id}")

    @admin.display(description="refund")
    def refund_link(self, returned):
        refund = returned.refund
        if refund is None:
            return "-"
        money = format_money(refund.amount, refund.currency)
        return _link("refund", refund.id, f"{money} ({refund.get_status_display()})")

    def _decide(self, request, queryset, service, done: str):
        for returned in queryset:
            if returned.status != Return.Status.REQUESTED:
                self.message_user(request, f"Return {returned.id}: skipped, it is {returned.status}.", messages.WARNING)
                continue
            try:
                service(return_id=returned.id, user=request.user)
            except DomainError as error:
                self.message_user(request, f"Return {returned.id}: {error.message}", messages.ERROR)
            else:
                done_here = f"Return {returned.id} (order {returned.order_id}): {done}."
                self.message_user(request, done_here, messages.SUCCESS)

    @admin.action(description="Approve selected requested returns", permissions=["change"])
    def approve(self, request, queryset):
        self._decide(request, queryset, approve_return, "approved, the shopper may send the parcel")

    @admin.action(
        description="Reject selected requested returns (their units may be returned again)", permissions=["change"]
    )
    def reject(self, request, queryset):
        self._decide(request, queryset, reject_return, "rejected")
