"""Erasing a shopper's personal data (GDPR article 17) while the books still add up.

What identifies the shopper goes: the account's name, e-mail and password (the
login disabled, every token revoked), the saved address (its row and its copy in
Redis), the cart in Redis, the address snapshots of their orders and of the
warehouse's shipments, the address checkout saw (`hold_address`), the e-mail
address of the notifications sent, the words of their returns, the payment
provider's notification bodies (a checkout session names the payer) and the same
copies in the outbox's event payloads, published or not. What the books need
stays: orders, items, payments (ids, amounts, statuses, dates), refunds, returns,
loyalty points and the stock ledger, all still pointing at the same (now
anonymous) user id. Each address placeholder keeps its country: a country alone
identifies nobody, and the tax books need the place of supply.

The order's rows are the shopper's as long as money or goods may still move:
an order awaiting payment or shipment (PENDING_PAYMENT, PAID, PAYMENT_LAPSED),
or a return requested or approved, refuses the erasure (AccountHasOpenOrders).
A staff account is never erased as a shopper (AccountIsStaff).

A `CustomerErased` event tells every consumer to erase its own copy (the email
consumer's notifications written meanwhile; docs/events.md). Erasing again is
harmless: it finds the placeholders and keeps the first `erased_at`."""

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from cart.storage import cart_key, taken_key
from core.exceptions import CacheUnavailable, DomainError, NotFound
from core.locks import for_update
from core.sharding import customer_redis
from inventory.services import replace_shipment_addresses
from orders.exceptions import AccountHasOpenOrders, AccountIsStaff
from orders.locks import lock_orders, lock_pending_counts
from orders.models import Notification, Order, OrderStatus, Payment, Return, ReturnStatus
from outbox.services import record_event, rewrite_payloads
from shop.exceptions import WrongPassword
from shop.models import Account, Address
from shop.services import address_key, set_password

User = get_user_model()

# Placeholders that keep every CHECK and pattern the columns have: an address
# snapshot keeps all of shop.models.ADDRESS_FIELDS, the phone matches
# PHONE_PATTERN, and the e-mail is in RFC 2606's reserved `.invalid`: never delivered.
ERASED = "erased"
ERASED_PHONE = "0000000"
ERASED_EMAIL = "erased@erased.invalid"
ERASED_BODY = '{"erased": true}'  # a payment's raw_body: its amounts are in its columns

# Money or goods may still move: the shopper must be reachable until they have.
OPEN_ORDER_STATUSES = (OrderStatus.PENDING_PAYMENT, OrderStatus.PAID, OrderStatus.PAYMENT_LAPSED)
OPEN_RETURN_STATUSES = (ReturnStatus.REQUESTED, ReturnStatus.APPROVED)


def erased_username(customer_id: int) -> str:
    return f"erased-{customer_id}"


def erased_address(address: dict | None) -> dict | None:
    """An address snapshot's placeholder: every field there, the country kept."""
    if not address:
        return address
    return {
        "name": ERASED,
        "line1": ERASED,
        "line2": "",
        "city": ERASED,
        "postal_code": ERASED,
        "country": address.get("country", ""),
        "phone": ERASED_PHONE,
    }


@dataclass(frozen=True)
class Erasure:
    customer_id: int
    erased_at: datetime  # the first erasure's moment (an erasure repeated keeps it)
    orders: int  # the orders kept, their personal data replaced
    repeated: bool  # the account had been erased before


def erasure_refusals(*, customer_ids: Iterable[int]) -> dict[int, DomainError]:
    """Why each of these accounts cannot be erased now (none: absent), in three
    queries whatever their number: staff, or orders and returns still open."""
    ids = list(customer_ids)
    refusals: dict[int, DomainError] = {}
    for pk, is_staff, is_superuser in User.objects.filter(pk__in=ids).values_list("pk", "is_staff", "is_superuser"):
        if is_staff or is_superuser:
            refusals[pk] = AccountIsStaff()
    orders: dict[int, list[dict]] = {}
    returns: dict[int, list[dict]] = {}
    for customer_id, order_id, status in (
        Order.objects.filter(customer_id__in=ids, status__in=OPEN_ORDER_STATUSES)
        .order_by("id")
        .values_list("customer_id", "id", "status")
    ):
        orders.setdefault(customer_id, []).append({"id": order_id, "status": status})
    for customer_id, return_id, order_id, status in (
        Return.objects.filter(order__customer_id__in=ids, status__in=OPEN_RETURN_STATUSES)
        .order_by("id")
        .values_list("order__customer_id", "id", "order_id", "status")
    ):
        returns.setdefault(customer_id, []).append({"id": return_id, "order_id": order_id, "status": status})
    for customer_id in (orders.keys() | returns.keys()) - refusals.keys():
        refusals[customer_id] = AccountHasOpenOrders(
            orders=orders.get(customer_id, []), returns=returns.get(customer_id, [])
        )
    return refusals


def erase_own_account(*, user: AbstractBaseUser, password: str) -> Erasure:
    """The shopper's own erasure (DELETE /api/auth/me): their password first."""
    if not user.check_password(password):
        raise WrongPassword()
    return erase_customer(customer_id=user.pk)


@transaction.atomic
def erase_customer(*, customer_id: int) -> Erasure:
    """Replace the shopper's personal data by placeholders, keep the books (see
    the module's docstring). One transaction: the caches in Redis (tokens,
    saved address, cart) are dropped before it commits, and CacheUnavailable
    leaves everything as it was when Redis cannot be told."""
    # A second erasure of the same shopper (a double click) waits for the first.
    user = for_update(User.objects.filter(pk=customer_id)).first()
    if user is None:
        raise NotFound("No such account.")
    # Locks in core/locks.py's order: orders, returns, payments, the pending-order
    # counter, shipments; then the tables no other writer locks with these.
    orders = lock_orders(Order.objects.filter(customer_id=customer_id).values_list("id", flat=True))
    if refusal := erasure_refusals(customer_ids=[customer_id]).get(customer_id):
        raise refusal
    order_ids = [order.id for order in orders]

    try:  # before the database changes: nothing is erased when Redis cannot be told
        customer_redis().delete(address_key(customer_id), cart_key(customer_id), taken_key(customer_id))
    except RedisError as error:
        raise CacheUnavailable() from error
    transaction.on_commit(lambda: _forget_in_redis(customer_id))  # a checkout's refill in between

    for order in orders:
        order.shipping_address, order.hold_address = erased_address(order.shipping_address), ""
    Order.objects.bulk_update(orders, ["shipping_address", "hold_address"], batch_size=500)
    Return.objects.filter(order_id__in=order_ids).exclude(reason__in=["", ERASED]).update(reason=ERASED)
    Payment.objects.filter(order_id__in=order_ids).exclude(raw_body=ERASED_BODY).update(raw_body=ERASED_BODY)
    # Checkout takes this row's lock with a slot: a checkout that got in before the
    # orders were read has committed once it is ours, and its order is seen here.
    lock_pending_counts(customer_ids=[customer_id])
    if late := list(Order.objects.filter(customer_id=customer_id).exclude(id__in=order_ids).values("id", "status")):
        raise AccountHasOpenOrders(orders=late, returns=[])
    replace_shipment_addresses(order_ids=order_ids, replace=erased_address)

    forget_notification_addresses(customer_id=customer_id)
    _scrub_events(order_ids)
    Address.objects.filter(customer_id=customer_id).delete()
    set_password(user=user, password=None)  # every token revoked, each out of Redis before the commit
    username = erased_username(customer_id)
    if User.objects.filter(username=username).exclude(pk=customer_id).exists():
        username = f"{username}-{secrets.token_hex(4)}"  # someone registered the name: still unique, still nobody's
    user.username, user.email, user.first_name, user.last_name = username, "", "", ""
    user.is_active = False
    user.save(update_fields=["username", "email", "first_name", "last_name", "is_active"])
    LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(User), object_id=str(customer_id)).update(
        object_repr=user.username
    )
    before = Account.objects.filter(customer_id=customer_id).values_list("erased_at", flat=True).first()
    erased_at = before or timezone.now()
    Account.objects.update_or_create(
        customer_id=customer_id,
        defaults={"verified_email": "", "email_verified_at": None, "pending_email": "", "erased_at": erased_at},
    )
    record_event(
        aggregate_type="customer",
        aggregate_id=customer_id,
        event_type="CustomerErased",
        data={"customer_id": customer_id, "erased_at": erased_at.isoformat()},
    )
    return Erasure(customer_id=customer_id, erased_at=erased_at, orders=len(orders), repeated=before is not None)


def forget_notification_addresses(*, customer_id: int) -> int:
    """The address each notification of the shopper's orders went to, replaced
    (the erasure, and the email consumer's CustomerErased): how many changed."""
    return Notification.objects.filter(order__customer_id=customer_id).exclude(to=ERASED_EMAIL).update(to=ERASED_EMAIL)


def _forget_in_redis(customer_id: int) -> None:
    try:
        customer_redis().delete(address_key(customer_id), cart_key(customer_id), taken_key(customer_id))
    except RedisError:  # deleted before the commit already; a refill meanwhile expires with its TTL
        pass


def _scrub_events(order_ids: list[int]) -> None:
    """The outbox's copies of the orders' addresses and return reasons, published
    or not (the relay publishes an unpublished one scrubbed). Kafka keeps what was
    published before until its retention ends: the consumers erase their own
    copies on CustomerErased."""

    def scrubbed(event_type: str, payload: dict) -> dict:
        if payload.get("shipping_address"):
            payload["shipping_address"] = erased_address(payload["shipping_address"])
        if event_type == "ReturnRequested" and payload.get("reason"):
            payload["reason"] = ERASED
        return payload

    rewrite_payloads(aggregate_type="order", aggregate_ids=order_ids, rewrite=scrubbed)
