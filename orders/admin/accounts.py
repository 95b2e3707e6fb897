"""Staff erasing shoppers' personal data from the user admin. Erasure rewrites
the rows of every app below orders (orders/services/erasure.py), which shop
cannot import: orders extends shop's user admin (shop/admin.py ShopUserAdmin)
with the action and registers it in its place."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.db.models import Count
from django.template.response import TemplateResponse

from core.exceptions import DomainError
from orders.exceptions import AccountHasOpenOrders, AccountIsStaff
from orders.models import Order
from orders.services.erasure import erase_customer, erasure_refusals
from shop.admin import ShopUserAdmin
from shop.models import Account

User = get_user_model()


def refusal_text(refusal: DomainError) -> str:
    """Why an account cannot be erased, as staff read it: the orders and returns still open."""
    if not isinstance(refusal, AccountHasOpenOrders):
        return refusal.message
    details = refusal.details
    open_ = [f"order {o['id']} ({o['status']})" for o in details.get("orders", [])]
    open_ += [f"return {r['id']} of order {r['order_id']} ({r['status']})" for r in details.get("returns", [])]
    return f"{', '.join(open_)} still open: erase it once they are done or cancelled."


admin.site.unregister(User)


@admin.register(User)
class CustomerAdmin(ShopUserAdmin):
    actions = ["erase_personal_data"]

    @admin.action(description="Erase selected shoppers' personal data", permissions=["change"])
    def erase_personal_data(self, request, queryset):
        users = list(queryset.order_by("pk"))
        if request.POST.get("post") != "yes":
            return self._erasure_confirmation(request, users)
        for user in users:
            try:
                erasure = erase_customer(customer_id=user.pk)
            except (AccountIsStaff, AccountHasOpenOrders) as refusal:
                why = refusal_text(refusal)
                self.message_user(request, f"Customer {user.pk} ({user.username}) not erased: {why}", messages.ERROR)
                continue
            user.refresh_from_db()
            self.log_change(request, user, "Erased the shopper's personal data.")
            again = " (erased before: done again)" if erasure.repeated else ""
            self.message_user(
                request,
                f"Customer {user.pk}: personal data erased{again}; {erasure.orders} order(s) kept, anonymous.",
                messages.SUCCESS,
            )

    def _erasure_confirmation(self, request, users):
        """Django's intermediate page (as for the delete action): each account, its
        orders, and whether it will be erased or why not."""
        ids = [user.pk for user in users]
        refusals = erasure_refusals(customer_ids=ids)
        erased = dict(
            Account.objects.filter(customer_id__in=ids, erased_at__isnull=False).values_list("customer_id", "erased_at")
        )
        orders = dict(
            Order.objects.filter(customer_id__in=ids)
            .order_by()
            .values("customer_id")
            .annotate(count=Count("id"))
            .values_list("customer_id", "count")
        )
        rows = [
            {
                "id": user.pk,
                "username": user.username,
                "email": user.email,
                "orders": orders.get(user.pk, 0),
                "refusal": refusal_text(refusals[user.pk]) if user.pk in refusals else "",
                "erased_at": erased.get(user.pk),
            }
            for user in users
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Erase these shoppers' personal data?",
            "rows": rows,
            "erasable": sum(1 for row in rows if not row["refusal"]),
            "action": "erase_personal_data",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/orders/customer/erase_confirmation.html", context)
