"""A shopper's personal data exported (GET /api/auth/me/export) and erased
(DELETE /api/auth/me, and staff's action on the user admin): afterwards the
shopper's name, e-mail, phone and address appear in no column of any table
and in no Redis key, while the books (orders, payments, refunds, returns,
loyalty points, the stock ledger) are exactly what they were; the
CustomerErased consumers; the refusals (open orders and returns, staff, a
wrong password)."""

import io
import json
from types import SimpleNamespace

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.core import mail
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cart.storage import cart_key, taken_key
from core.authentication import token_digest
from inventory.models import Shipment, StockMovement
from inventory.services import stock_audit
from orders.handlers import forget_erased_customer_addresses
from orders.models import Notification, Order, OrderItem, OrderStatus, Payment, Refund, Return, ReturnStatus
from orders.services import approve_return, receive_return
from orders.services.erasure import ERASED, ERASED_BODY, ERASED_EMAIL, ERASED_PHONE, erase_customer
from outbox.consumers import Event, apply_event
from outbox.models import OutboxEvent, UnpublishedEvent
from shop.handlers import keep_points_of_an_erased_customer
from shop.models import Account, Address, LoyaltyEntry
from shop.services import address_key
from tests.factories import (
    PASSWORD,
    OrderFactory,
    OrderItemFactory,
    PaymentFactory,
    ShopperWithoutAddressFactory,
    UserFactory,
    api_token,
    product_with_stock,
)
from tests.helpers import (
    client_with,
    consumer_event,
    fill_cart,
    place_pending_order,
    shopper_client,
    staff_client,
    stop_redis_for_this_process,
)
from tests.locks import recording_locks
from tests.orders.test_returns import ask, ship

pytestmark = pytest.mark.django_db

User = get_user_model()

# The shopper's personal data: strings found nowhere else, so that a search finds only theirs.
USERNAME = "zquillfeather"
EMAIL = "zelda.quillfeather@example.org"
NEW_EMAIL = "zq.pending@example.net"
FIRST, LAST = "Zeldina", "Quillfeather"
ADDRESS = {
    "name": "Zeldina Quillfeather",
    "line1": "77 Wisteria Lane",
    "line2": "Flat Q9",
    "city": "Quillbury",
    "postal_code": "QX9 7ZZ",
    "country": "ES",
    "phone": "+44 7700 900777",
}
CLIENT_ADDRESS = "198.51.100.77"  # what checkout saw (Order.hold_address): an IP address is personal data too
PERSONAL = [USERNAME, EMAIL, NEW_EMAIL, FIRST, LAST, CLIENT_ADDRESS, *(ADDRESS[f] for f in ADDRESS if f != "country")]
# A Stripe checkout session's body names the payer (customer_details).
STRIPE_BODY = json.dumps(
    {
        "type": "checkout.session.completed",
        "data": {"object": {"amount_total": 2599, "customer_details": {"email": EMAIL, "name": ADDRESS["name"]}}},
    }
)


def deliver(order_ids, consumers=("email", "loyalty", "warehouse")) -> None:
    """The orders' outbox events through the shop's own consumers, as Kafka would bring them."""
    for row in OutboxEvent.objects.filter(aggregate_id__in=[str(i) for i in order_ids]).order_by("id"):
        event = Event(
            row.event_id, row.event_type, row.created_at.isoformat(), row.aggregate_type, row.aggregate_id, row.payload
        )
        for consumer in consumers:
            apply_event(consumer=consumer, event=event)


@pytest.fixture
def history(redis, provider):
    """A shopper with a life in the shop: a verified e-mail and one pending, a saved
    address (in Redis too), a cart, an order shipped (paid by a Stripe-like body
    naming them) with a return received and refunded, an order cancelled; the
    e-mails, loyalty points and shipment the consumers made; some events published,
    some not; an admin log entry naming them."""
    product_with_stock(sku="A", price=1000, available=10)
    product_with_stock(sku="B", price=599, available=10)
    user = ShopperWithoutAddressFactory(username=USERNAME, email=EMAIL, first_name=FIRST, last_name=LAST)
    client = shopper_client(user)
    assert client.put("/api/auth/me/address", ADDRESS, format="json").status_code == 200
    Account.objects.create(
        customer=user, verified_email=EMAIL, email_verified_at=timezone.now(), pending_email=NEW_EMAIL
    )

    shipped = place_pending_order(redis, user, {"A": 2, "B": 1}, key="first")
    Order.objects.filter(id=shipped.id).update(hold_address=CLIENT_ADDRESS)
    payment = ship(shipped, "pay_erasure")
    Payment.objects.filter(id=payment.id).update(raw_body=STRIPE_BODY)
    returned = ask(client, shipped, [{"sku": "A", "quantity": 1}], reason=f"{FIRST} says: too small")
    assert returned.status_code == 201, returned.content
    approve_return(return_id=returned.json()["id"])
    receive_return(return_id=returned.json()["id"], conditions={"A": "restock"})
    cancelled = place_pending_order(redis, user, {"B": 1}, key="second")
    assert client.post(f"/api/orders/{cancelled.id}/cancel").status_code == 200
    deliver([shipped.id, cancelled.id])

    published = OutboxEvent.objects.filter(aggregate_id=str(shipped.id))
    published.update(published_at=timezone.now())
    UnpublishedEvent.objects.filter(event__in=published).delete()
    staff = UserFactory(is_staff=True)
    LogEntry.objects.create(
        user=staff,
        content_type=ContentType.objects.get_for_model(User),
        object_id=str(user.pk),
        object_repr=USERNAME,
        action_flag=CHANGE,
        change_message="[]",
    )
    fill_cart(redis, user.id, {"A": 1})
    redis.set(taken_key(user.id), "first")
    return SimpleNamespace(user=user, client=client, shipped=shipped, cancelled=cancelled)


def columns_holding(needles: list[str]) -> dict[str, list[str]]:
    """Every text, varchar, json and jsonb column of every table of the schema
    searched for each needle (case-insensitive): {"table.column": [needles found]}."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c "
            "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
            "WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' "
            "AND c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb') "
            "ORDER BY 1, 2"
        )
        columns = cursor.fetchall()
        assert len(columns) > 50  # the search sees the whole schema, not a corner of it
        found = {}
        for table, column in columns:
            name, quoted = f"{table}.{column}", connection.ops.quote_name
            for needle in needles:
                cursor.execute(
                    f"SELECT 1 FROM {quoted(table)} WHERE {quoted(column)}::text ILIKE %s LIMIT 1",  # noqa: S608
                    [f"%{needle}%"],
                )
                if cursor.fetchone():
                    found.setdefault(name, []).append(needle)
    return found


def redis_holding(redis, needles: list[str]) -> dict[str, list[str]]:
    """Every key of the tests' Redis database, its value read whatever its type, searched for each needle."""
    found = {}
    for key in redis.scan_iter(count=1000):
        kind = redis.type(key).decode()
        value = {
            "string": lambda k: redis.get(k),
            "hash": lambda k: redis.hgetall(k),
            "list": lambda k: redis.lrange(k, 0, -1),
            "set": lambda k: redis.smembers(k),
            "zset": lambda k: redis.zrange(k, 0, -1),
        }.get(kind, lambda k: b"")(key)
        text = (key + repr(value).encode()).decode(errors="replace").lower()
        if hits := [n for n in needles if n.lower() in text]:
            found[key.decode()] = hits
    return found


def books() -> dict:
    """What the books are made of: every amount, status, date and SKU of orders,
    items, payments, refunds, returns, loyalty and the stock ledger."""
    order_fields = [f.name for f in Order._meta.concrete_fields if f.name not in ("shipping_address", "hold_address")]
    return {
        "orders": list(Order.objects.order_by("id").values(*order_fields)),
        "items": list(OrderItem.objects.order_by("id").values()),
        "payments": list(
            Payment.objects.order_by("id").values(
                *[f.attname for f in Payment._meta.concrete_fields if f.name != "raw_body"]
            )
        ),
        "refunds": list(Refund.objects.order_by("id").values()),
        "returns": list(
            Return.objects.order_by("id").values(
                *[f.attname for f in Return._meta.concrete_fields if f.name != "reason"]
            )
        ),
        "loyalty": list(LoyaltyEntry.objects.order_by("id").values()),
        "ledger": list(StockMovement.objects.order_by("id").values()),
        "stock": stock_audit(),
    }


def audit() -> str:
    out = io.StringIO()
    call_command("stock_audit", stdout=out)  # CommandError when stock is not conserved
    return out.getvalue()


def delete_me(client, password=PASSWORD):
    return client.delete("/api/auth/me", {"password": password}, format="json")


def error(response) -> str:
    return response.json()["error"]["code"]


# --- export ----------------------------------------------------------------------------------


def test_export_holds_the_account_address_orders_payments_returns_notifications_and_points(history):
    response = history.client.get("/api/auth/me/export")
    assert response.status_code == 200
    data = response.json()
    assert data["account"] == {
        "id": history.user.id,
        "username": USERNAME,
        "email": EMAIL,
        "first_name": FIRST,
        "last_name": LAST,
        "date_joined": data["account"]["date_joined"],
        "last_login": None,
        "email_verified": True,
        "verified_email": EMAIL,
        "email_verified_at": data["account"]["email_verified_at"],
        "pending_email": NEW_EMAIL,
    }
    assert data["address"] == ADDRESS
    shipped, cancelled = data["orders"]
    assert (shipped["id"], shipped["status"], cancelled["id"], cancelled["status"]) == (
        history.shipped.id,
        "SHIPPED",
        history.cancelled.id,
        "CANCELLED",
    )
    assert shipped["shipping_address"] == ADDRESS and shipped["total"] == 2599
    assert [(i["sku"], i["quantity"], i["returned"], i["refunded"]) for i in shipped["items"]] == [
        ("A", 2, 1, 1),
        ("B", 1, 0, 0),
    ]
    [payment] = shipped["payments"]
    assert payment["payment_id"] == "pay_erasure" and payment["amount"] == payment["captured_amount"] == 2599
    assert (payment["status"], payment["outcome"], payment["refunded_amount"]) == ("captured", "applied", 1000)
    [refund] = shipped["refunds"]
    assert (refund["amount"], refund["reason"]) == (1000, "return")
    [returned] = shipped["returns"]
    assert returned["status"] == "RECEIVED" and returned["reason"] == f"{FIRST} says: too small"
    assert returned["lines"] == [{"sku": "A", "quantity": 1, "condition": "restock"}]
    assert returned["refund_amount"] == 1000
    assert cancelled["payments"] == [] and cancelled["returns"] == []
    kinds = [(n["order_id"], n["kind"]) for n in data["notifications"]]
    assert (history.shipped.id, "order_confirmed") in kinds and (history.cancelled.id, "order_cancelled") in kinds
    assert {n["to"] for n in data["notifications"]} == {EMAIL}
    # Points earned on payment (the refund's come back once the provider confirms it: no RefundCompleted here).
    assert [(e["order_id"], e["points"], e["reason"]) for e in data["loyalty_entries"]] == [
        (history.shipped.id, 25, "order_paid")
    ]
    assert data["loyalty_balance"] == 25
    assert "raw_body" not in response.content.decode() and "customer_details" not in response.content.decode()


def test_export_takes_the_same_queries_whatever_the_number_of_orders(history):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert history.client.get("/api/auth/me/export").status_code == 200
        return len(captured)

    before = queries()
    for _ in range(3):
        order = OrderFactory(customer=history.user, status=OrderStatus.SHIPPED, shipped_at=timezone.now())
        OrderItemFactory(order=order, product_id="A", quantity=1, unit_price=1000)
        PaymentFactory(order=order)
        Notification.objects.create(order=order, kind="order_shipped", to=EMAIL, subject="shipped")
        Return.objects.create(order=order, status=ReturnStatus.REJECTED, decided_at=timezone.now())
    assert queries() == before


def test_export_needs_a_token(api_client):
    assert api_client.get("/api/auth/me/export").status_code == 401


# --- erasure ---------------------------------------------------------------------------------


def test_erasure_leaves_the_shoppers_data_in_no_column_and_no_redis_key_and_the_books_as_they_were(history, redis):
    before = columns_holding(PERSONAL)
    assert set(sum(before.values(), [])) == set(PERSONAL)  # the search finds each of them before
    assert {
        "auth_user.username",
        "auth_user.email",
        "orders.hold_address",
        "auth_user.first_name",
        "shop_address.line1",
        "shop_account.verified_email",
        "shop_account.pending_email",
        "orders.shipping_address",
        "orders_payment.raw_body",
        "orders_return.reason",
        "orders_notification.to",
        "inventory_shipment.shipping_address",
        "outbox_events.payload",
        "django_admin_log.object_repr",
    } <= set(before)
    assert redis_holding(redis, PERSONAL)  # the saved address and the token caches
    kept, audited = books(), audit()
    second_token = api_token(history.user)

    assert delete_me(history.client).status_code == 204

    assert columns_holding(PERSONAL) == {}
    assert redis_holding(redis, PERSONAL) == {}
    assert books() == kept and audit() == audited and "0 with a difference" in audited
    user = User.objects.get(pk=history.user.pk)
    assert (user.username, user.email, user.first_name, user.last_name) == (f"erased-{user.pk}", "", "", "")
    assert not user.is_active and not user.has_usable_password()
    assert not Address.objects.filter(customer=user).exists()
    assert redis.exists(address_key(user.id), cart_key(user.id), taken_key(user.id)) == 0
    assert not redis.exists(f"auth:token:{token_digest(second_token)}")
    account = Account.objects.get(customer=user)
    assert account.erased_at is not None and (account.verified_email, account.pending_email) == ("", "")
    placeholder = {
        "name": ERASED,
        "line1": ERASED,
        "line2": "",
        "city": ERASED,
        "postal_code": ERASED,
        "country": "ES",
        "phone": ERASED_PHONE,
    }
    for order in Order.objects.filter(customer=user):
        assert order.shipping_address == placeholder and order.hold_address == ""
    assert Shipment.objects.get(order_id=history.shipped.id).shipping_address == placeholder
    assert set(Notification.objects.filter(order__customer=user).values_list("to", flat=True)) == {ERASED_EMAIL}
    assert Payment.objects.get(provider_payment_id="pay_erasure").raw_body == ERASED_BODY
    assert Return.objects.get(order=history.shipped).reason == ERASED
    for event in OutboxEvent.objects.filter(aggregate_type="order"):
        assert event.payload.get("shipping_address") in (None, placeholder)
    [erased] = OutboxEvent.objects.filter(event_type="CustomerErased")
    assert (erased.aggregate_type, erased.aggregate_id) == ("customer", str(user.pk))
    assert erased.payload == {"customer_id": user.pk, "erased_at": account.erased_at.isoformat()}

    # The login is gone: both tokens, the password, the username.
    assert history.client.get("/api/auth/me").status_code == 401
    assert client_with(second_token).get("/api/auth/me").status_code == 401
    login = {"username": USERNAME, "password": PASSWORD}
    assert history.client.post("/api/auth/token", login, format="json").status_code == 401
    login["username"] = user.username
    assert history.client.post("/api/auth/token", login, format="json").status_code == 401


def test_erasure_locks_rows_in_the_declared_order(history):
    with recording_locks() as record:
        erase_customer(customer_id=history.user.pk)
    # The tables erasure alone writes (the user, tokens, notifications, events…) are in no lock order.
    assert [b for b in record.broken() if "not in core/locks.py" not in b] == []
    [kinds] = record.kinds()
    declared = ["orders", "orders_return", "orders_payment", "order_pending_counts", "inventory_shipment"]
    assert [kind for kind in kinds if kind in declared] == declared


def test_erasing_again_changes_nothing_and_keeps_the_first_moment(history):
    first = erase_customer(customer_id=history.user.pk)
    kept, columns = books(), columns_holding(PERSONAL)
    again = erase_customer(customer_id=history.user.pk)
    assert (first.repeated, again.repeated, again.erased_at) == (False, True, first.erased_at)
    assert books() == kept and columns == {} and columns_holding(PERSONAL) == {}
    assert OutboxEvent.objects.filter(event_type="CustomerErased").count() == 2  # consumers are idempotent


def test_erasure_keeps_usernames_unique_when_a_shopper_took_the_placeholder():
    erased = UserFactory()
    squatter = UserFactory(username=f"erased-{erased.pk}")
    erase_customer(customer_id=erased.pk)
    erased.refresh_from_db()
    assert erased.username.startswith(f"erased-{erased.pk}-") and not erased.is_active
    assert User.objects.get(pk=squatter.pk).username == f"erased-{erased.pk}"


def test_erasure_with_redis_down_changes_nothing(history, settings):
    stop_redis_for_this_process(settings)
    response = delete_me(history.client)
    assert response.status_code == 503 and error(response) == "cache_unavailable"
    user = User.objects.get(pk=history.user.pk)
    assert (user.username, user.is_active) == (USERNAME, True)
    assert Order.objects.get(id=history.shipped.id).shipping_address == ADDRESS
    assert not OutboxEvent.objects.filter(event_type="CustomerErased").exists()


# --- refusals --------------------------------------------------------------------------------


def assert_untouched(client) -> None:
    user = User.objects.get(pk=client.user.pk)
    assert (user.username, user.email, user.is_active) == (client.user.username, client.user.email, True)
    assert Address.objects.filter(customer=user).exists()
    assert not Account.objects.filter(customer=user, erased_at__isnull=False).exists()
    assert not OutboxEvent.objects.filter(event_type="CustomerErased").exists()
    assert client.get("/api/auth/me").status_code == 200  # the token still works


@pytest.mark.parametrize(
    "status", [OrderStatus.PENDING_PAYMENT, OrderStatus.PAID, OrderStatus.PAYMENT_LAPSED], ids=str.lower
)
def test_erasure_is_refused_while_an_order_awaits_payment_or_shipment(status):
    client = shopper_client()
    OrderFactory(customer=client.user, status=OrderStatus.CANCELLED)
    order = OrderFactory(customer=client.user, status=status)
    response = delete_me(client)
    assert response.status_code == 409 and error(response) == "account_has_open_orders"
    assert response.json()["error"]["details"] == {"orders": [{"id": order.id, "status": status}], "returns": []}
    assert Order.objects.get(id=order.id).shipping_address["name"] == "Ana García"
    assert_untouched(client)


@pytest.mark.parametrize("status", [ReturnStatus.REQUESTED, ReturnStatus.APPROVED], ids=str.lower)
def test_erasure_is_refused_while_a_return_is_open(status):
    client = shopper_client()
    order = OrderFactory(customer=client.user, status=OrderStatus.SHIPPED, shipped_at=timezone.now())
    decided = timezone.now() if status == ReturnStatus.APPROVED else None
    returned = Return.objects.create(order=order, status=status, decided_at=decided)
    Return.objects.create(order=order, status=ReturnStatus.REJECTED, decided_at=timezone.now())
    response = delete_me(client)
    assert response.status_code == 409 and error(response) == "account_has_open_orders"
    details = response.json()["error"]["details"]
    assert details == {"orders": [], "returns": [{"id": returned.id, "order_id": order.id, "status": status}]}
    assert_untouched(client)


@pytest.mark.parametrize("flag", ["is_staff", "is_superuser"])
def test_a_staff_account_is_not_erased_as_a_shopper(flag):
    client = shopper_client(UserFactory(**{flag: True}))
    response = delete_me(client)
    assert response.status_code == 409 and error(response) == "account_is_staff"
    assert_untouched(client)


def test_erasure_with_a_wrong_or_no_password_is_refused():
    client = shopper_client()
    response = delete_me(client, password="not-the-password")
    assert response.status_code == 400 and error(response) == "wrong_password"
    response = client.delete("/api/auth/me", {}, format="json")
    assert response.status_code == 400 and error(response) == "invalid"
    assert_untouched(client)


def test_get_auth_me_is_still_shops_view(api_client):
    client = shopper_client()
    me = client.get("/api/auth/me")
    assert me.status_code == 200 and me.json()["username"] == client.user.username
    assert api_client.delete("/api/auth/me", {"password": PASSWORD}, format="json").status_code == 401


# --- the CustomerErased consumers --------------------------------------------------------------


def test_email_consumer_replaces_the_address_of_notifications_written_meanwhile_once():
    customer, other = UserFactory(email=EMAIL), UserFactory()
    order = OrderFactory(customer=customer, status=OrderStatus.SHIPPED, shipped_at=timezone.now())
    theirs = OrderFactory(customer=other, status=OrderStatus.SHIPPED, shipped_at=timezone.now())
    Notification.objects.create(order=theirs, kind="order_shipped", to=other.email, subject="Shipped")
    erasure = erase_customer(customer_id=customer.pk)
    # The email consumer read the e-mail before the erasure committed, and wrote after it.
    late = Notification.objects.create(order=order, kind="order_shipped", to=EMAIL, subject="Shipped")
    event = consumer_event("CustomerErased", customer_id=customer.pk, erased_at=erasure.erased_at.isoformat())

    forget_erased_customer_addresses(event)
    forget_erased_customer_addresses(event)  # a redelivery finds nothing to change

    late.refresh_from_db()
    assert late.to == ERASED_EMAIL
    assert Notification.objects.get(order=theirs).to == other.email
    # And nothing more is sent to the erased shopper: they have no address.
    paid = consumer_event("OrderPaid", order_id=order.id, customer_id=customer.pk, total=1000, currency="EUR", items=[])
    apply_event(consumer="email", event=paid)
    assert mail.outbox == [] and Notification.objects.filter(order=order).count() == 1


def test_loyalty_consumer_keeps_the_points_of_an_erased_shopper():
    customer = UserFactory()
    order = OrderFactory(customer=customer, status=OrderStatus.SHIPPED, shipped_at=timezone.now())
    apply_event(
        consumer="loyalty",
        event=consumer_event("OrderPaid", order_id=order.id, customer_id=customer.pk, total=2500, currency="EUR"),
    )
    erasure = erase_customer(customer_id=customer.pk)
    points = list(LoyaltyEntry.objects.values())
    event = consumer_event("CustomerErased", customer_id=customer.pk, erased_at=erasure.erased_at.isoformat())
    keep_points_of_an_erased_customer(event)
    assert list(LoyaltyEntry.objects.values()) == points and points[0]["points"] == 25
    assert apply_event(consumer="loyalty", event=event) == "processed"
    assert apply_event(consumer="loyalty", event=event) == "duplicate"


# --- the admin's action ------------------------------------------------------------------------


def erase_in_admin(client, *users, confirmed: bool = True):
    data = {"action": "erase_personal_data", "_selected_action": [u.pk for u in users]}
    if confirmed:
        data["post"] = "yes"
    return client.post("/admin/auth/user/", data, follow=True)


def said(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def test_admin_action_asks_for_confirmation_then_erases_and_refuses_each_that_cannot_be(redis):
    admin = staff_client(superuser=True)
    shopper = UserFactory(email=EMAIL)
    OrderFactory(customer=shopper, status=OrderStatus.CANCELLED)
    busy = UserFactory()
    open_order = OrderFactory(customer=busy, status=OrderStatus.PAID)
    staff = UserFactory(is_staff=True)

    asked = erase_in_admin(admin, shopper, busy, staff, confirmed=False)
    assert asked.status_code == 200
    assert asked.templates[0].name == "admin/orders/customer/erase_confirmation.html"
    page = asked.content.decode()
    assert EMAIL in page and "will be erased" in page
    assert f"refused: order {open_order.id} (PAID) still open" in page
    assert "refused: A staff or superuser account is not erased" in page
    assert page.count('name="_selected_action"') == 1 and f'name="_selected_action" value="{shopper.pk}"' in page
    assert 'name="post" value="yes"' in page and "Yes, erase 1 account" in page
    assert User.objects.get(pk=shopper.pk).email == EMAIL  # nothing erased by asking

    done = erase_in_admin(admin, shopper, busy, staff)  # all three posted, as from a stale page
    assert said(done) == [
        ("success", f"Customer {shopper.pk}: personal data erased; 1 order(s) kept, anonymous."),
        (
            "error",
            f"Customer {busy.pk} ({busy.username}) not erased: order {open_order.id} (PAID) still open: erase it "
            "once they are done or cancelled.",
        ),
        (
            "error",
            f"Customer {staff.pk} ({staff.username}) not erased: A staff or superuser account is not erased as a "
            "shopper's: take its staff status away first.",
        ),
    ]
    erased = User.objects.get(pk=shopper.pk)
    assert (erased.username, erased.email, erased.is_active) == (f"erased-{shopper.pk}", "", False)
    assert User.objects.get(pk=busy.pk).is_active and User.objects.get(pk=staff.pk).is_active
    [logged] = LogEntry.objects.filter(object_id=str(shopper.pk))
    assert (logged.object_repr, logged.user_id) == (f"erased-{shopper.pk}", admin.user.pk)
    assert columns_holding([EMAIL, shopper.username]) == {}
    again = erase_in_admin(admin, shopper, confirmed=False).content.decode()
    assert "will be erased again" in again and "Yes, erase 1 account" in again


def test_admin_action_needs_the_change_permission_on_users(redis):
    viewer = staff_client("Order managers")
    shopper = UserFactory()
    assert erase_in_admin(viewer, shopper).status_code == 403
    assert User.objects.get(pk=shopper.pk).is_active
