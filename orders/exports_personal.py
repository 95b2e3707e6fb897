"""A shopper's personal data, for them to take away (GDPR articles 15 and 20):
GET /api/auth/me/export. It is read here, at the top domain app, because it
spans the apps below: the account and its address (shop), orders with their
items, payments, refunds, returns and the notifications sent (orders), and the
loyalty ledger (shop). A fixed number of queries, whatever the number of orders."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Prefetch
from django.utils import timezone

from orders.models import Notification, Order, Payment, Return, ReturnLine
from shop.accounts import email_state
from shop.models import Account, Address, LoyaltyEntry


@dataclass(frozen=True)
class PersonalData:
    exported_at: datetime
    user: AbstractBaseUser
    email_verified: bool  # shop's answer (shop.accounts.email_state)
    account: Account | None  # None: the shopper verified nothing (no row)
    address: Address | None
    orders: list[Order]  # items, payments, refunds and returns (with their lines and refund) prefetched
    notifications: list[Notification]
    loyalty_entries: list[LoyaltyEntry]

    @property
    def loyalty_balance(self) -> int:
        return sum(entry.points for entry in self.loyalty_entries)


def personal_data(*, user: AbstractBaseUser) -> PersonalData:
    """Everything the shop keeps about the shopper, oldest first, in eleven queries."""
    customer_id = user.pk
    returns = Return.objects.select_related("refund").prefetch_related(
        Prefetch("lines", queryset=ReturnLine.objects.select_related("item"))
    )
    orders = (
        Order.objects.filter(customer_id=customer_id)
        .order_by("id")
        .prefetch_related(
            "items",
            "refunds",
            Prefetch("payments", queryset=Payment.objects.order_by("id")),
            Prefetch("returns", queryset=returns.order_by("id")),
        )
    )
    return PersonalData(
        exported_at=timezone.now(),
        user=user,
        email_verified=email_state(user=user).email_verified,
        account=Account.objects.filter(customer_id=customer_id).first(),
        address=Address.objects.filter(customer_id=customer_id).first(),
        orders=list(orders),
        notifications=list(Notification.objects.filter(order__customer_id=customer_id).order_by("id")),
        loyalty_entries=list(LoyaltyEntry.objects.filter(customer_id=customer_id).order_by("id")),
    )
