"""Shoppers behind one client address (a carrier's NAT, an office): the
per-address caps (MAX_UNPAID_UNITS_PER_ADDRESS, RATE_LIMIT_VOUCHER_ADDRESS)
still bind fresh accounts, while established shoppers (shop/established.py:
an account older than NEW_ACCOUNT_SECONDS with a verified e-mail, or a paid
order) count per account only; what decides it costs checkout no statement."""

import json
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.authentication import remembered_user_by_id
from core.hotcache import hot_cache
from orders.models import Order, OrderStatus
from orders.services.holds import held_units
from shop.established import account_established_changed, is_established, verified_emails
from shop.models import Account
from tests.factories import OrderFactory, PaymentFactory, UserFactory, VoucherFactory, product_with_stock
from tests.helpers import fill_cart, post_webhook, shopper_client
from tests.inventory.conftest import seed

pytestmark = pytest.mark.django_db

ADDRESS, OTHER_ADDRESS = "192.0.2.47", "203.0.113.47"
SALE = "FLASH-SHARED"


def verify(user, *, email: str | None = None):
    """The user's e-mail verified (as following the link does: Account, shop/models.py)."""
    Account.objects.update_or_create(
        customer=user, defaults={"verified_email": email or user.email, "email_verified_at": timezone.now()}
    )
    return user


def aged(**kwargs):
    """An account a month old (older than NEW_ACCOUNT_SECONDS)."""
    return UserFactory(date_joined=timezone.now() - timedelta(days=30), **kwargs)


def fresh(**kwargs):
    """An account made just now."""
    return UserFactory(date_joined=timezone.now(), **kwargs)


def from_address(user, address: str = ADDRESS):
    client = shopper_client(user)
    client.defaults["REMOTE_ADDR"] = address
    return client


def buy(client, redis, sku: str, key: str, quantity: int = 1):
    fill_cart(redis, client.user.id, {sku: quantity})
    return client.post("/api/orders", HTTP_IDEMPOTENCY_KEY=key)


def outcome(response) -> int | str:
    return response.status_code if response.status_code < 400 else response.json()["error"]["code"]


@pytest.fixture
def caps(settings):
    """The settings' defaults (tests/conftest.py lifts them out of the way)."""
    settings.MAX_UNPAID_UNITS_PER_SKU = 10
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 20
    settings.NEW_ACCOUNT_SECONDS = 3600


# --- the scenario: a flash sale of 30 units, 120 accounts behind one address ---


@pytest.mark.slow
def test_established_shoppers_behind_one_address_buy_the_whole_flash_sale(redis, caps):
    seed(sku=SALE, stock=30)  # a flash sale of 30 units, its gate open
    clients = [from_address(verify(aged())) for _ in range(120)]

    answers = Counter(outcome(buy(client, redis, SALE, "sale")) for client in clients)

    assert answers == {201: 30, "sold_out": 90}
    assert Order.objects.count() == 30
    assert set(Order.objects.values_list("hold_address", flat=True)) == {""}  # held per account only
    assert held_units(sku=SALE, address=ADDRESS) == 0
    assert all(held_units(sku=SALE, customer_id=o.customer_id) == 1 for o in Order.objects.all())


@pytest.mark.slow
def test_fresh_accounts_behind_one_address_still_share_its_cap(redis, caps):
    seed(sku=SALE, stock=30)  # a flash sale of 30 units, its gate open
    clients = [from_address(fresh()) for _ in range(120)]

    answers = Counter(outcome(buy(client, redis, SALE, "sale")) for client in clients)

    assert answers == {201: 20, "hold_limit_reached": 100}
    assert held_units(sku=SALE, address=ADDRESS) == 20 == Order.objects.count()
    assert set(Order.objects.values_list("hold_address", flat=True)) == {ADDRESS}
    # The refused checkouts gave their gate units back: the rest is still on sale, elsewhere.
    assert outcome(buy(from_address(fresh(), OTHER_ADDRESS), redis, SALE, "elsewhere")) == 201


def test_established_shoppers_leave_the_address_cap_to_the_others(redis, caps, settings):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 2
    product_with_stock(sku="MUG", price=100, available=100)
    assert [outcome(buy(from_address(verify(aged())), redis, "MUG", "e", 2)) for _ in range(5)] == [201] * 5
    throwaway = [outcome(buy(from_address(fresh()), redis, "MUG", "f")) for _ in range(3)]
    assert throwaway == [201, 201, "hold_limit_reached"]
    assert held_units(sku="MUG", address=ADDRESS) == 2


def test_an_established_shopper_is_still_capped_per_account(redis, caps, settings):
    settings.MAX_UNPAID_UNITS_PER_SKU = 3
    product_with_stock(sku="MUG", price=100, available=100)
    shopper = from_address(verify(aged()))
    assert outcome(buy(shopper, redis, "MUG", "a", 3)) == 201
    assert outcome(buy(shopper, redis, "MUG", "b", 1)) == "hold_limit_reached"
    assert held_units(sku="MUG", customer_id=shopper.user.id) == 3


# --- who is established ---


def test_an_account_with_a_paid_order_counts_per_account_only(redis, caps, settings):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1
    product_with_stock(sku="MUG", price=100, available=100)
    assert outcome(buy(from_address(fresh()), redis, "MUG", "f")) == 201  # the address's unit is taken

    paid = fresh()  # made just now, nothing verified: its paid order is enough
    OrderFactory(customer=paid, status=OrderStatus.SHIPPED)
    cancelled_after_paying = fresh()
    PaymentFactory(order=OrderFactory(customer=cancelled_after_paying, status=OrderStatus.CANCELLED))
    never_paid = aged()
    OrderFactory(customer=never_paid, status=OrderStatus.CANCELLED)

    assert outcome(buy(from_address(paid), redis, "MUG", "p")) == 201
    assert outcome(buy(from_address(cancelled_after_paying), redis, "MUG", "c")) == 201
    assert outcome(buy(from_address(never_paid), redis, "MUG", "n")) == "hold_limit_reached"


def test_a_first_payment_makes_the_shopper_established(
    redis, caps, settings, client, django_capture_on_commit_callbacks
):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1
    product_with_stock(sku="MUG", price=100, available=100)
    shopper = from_address(fresh())
    first = buy(shopper, redis, "MUG", "first")
    assert first.status_code == 201 and held_units(sku="MUG", address=ADDRESS) == 1
    assert outcome(buy(shopper, redis, "MUG", "before")) == "hold_limit_reached"

    with django_capture_on_commit_callbacks(execute=True):  # the payment commits: the shop learns of it
        order = Order.objects.get(id=first.json()["id"])
        post_webhook(client, payment_id="pay-first", order_id=order.id, amount=order.total_amount)
    assert held_units(sku="MUG", address=ADDRESS) == 0  # paid: no longer held

    assert outcome(buy(from_address(fresh()), redis, "MUG", "other")) == 201  # a newcomer takes the unit
    assert outcome(buy(shopper, redis, "MUG", "after")) == 201  # and the payer is no longer counted there
    assert Order.objects.get(idempotency_key="after").hold_address == ""


def test_a_verified_account_younger_than_new_account_seconds_counts_per_address(redis, caps, settings, monkeypatch):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1
    product_with_stock(sku="MUG", price=100, available=100)
    pinned = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: pinned)
    young = from_address(verify(UserFactory(date_joined=pinned - timedelta(seconds=3600 - 1))))
    assert outcome(buy(from_address(fresh()), redis, "MUG", "f")) == 201

    assert outcome(buy(young, redis, "MUG", "young")) == "hold_limit_reached"  # verified, a second short

    monkeypatch.setattr(timezone, "now", lambda: pinned + timedelta(seconds=1))  # an hour old now: no event needed
    assert outcome(buy(young, redis, "MUG", "of-age")) == 201
    assert Order.objects.get(idempotency_key="of-age").hold_address == ""


def test_an_old_account_without_a_verified_email_counts_per_address(redis, caps, settings):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1
    product_with_stock(sku="MUG", price=100, available=100)
    assert outcome(buy(from_address(fresh()), redis, "MUG", "f")) == 201
    unverified = aged()
    changed_since = verify(aged(), email="old-address@example.com")  # verified an address it no longer uses
    assert outcome(buy(from_address(unverified), redis, "MUG", "u")) == "hold_limit_reached"
    assert outcome(buy(from_address(changed_since), redis, "MUG", "c")) == "hold_limit_reached"


def test_verified_emails_compares_with_the_users_email():
    users = [verify(aged()), verify(aged(), email="before@example.com"), aged(), verify(aged(email=""), email="x@y.z")]
    assert [verified_emails(users)[u.pk]["email_verified"] for u in users] == [True, False, False, False]


# --- what the decision costs, and when it learns ---


def test_deciding_costs_an_established_checkout_no_statement(redis, caps):
    """A warm checkout through the API (the token from this process's memory, the
    address from Redis): k + 6 statements, as any shopper's (test_checkout.py)."""
    for sku in ("A", "B", "C"):
        product_with_stock(sku=sku, price=100, available=10)
    shopper = from_address(verify(aged()))
    fill_cart(redis, shopper.user.id, {"A": 1, "B": 1, "C": 1})
    warm_up = shopper.post("/api/orders", HTTP_IDEMPOTENCY_KEY="warm-up")  # the token read from the database
    assert warm_up.status_code == 201 and warm_up.json()["id"]  # (its facts with it) and the products cached

    fill_cart(redis, shopper.user.id, {"A": 1, "B": 1, "C": 1})
    with CaptureQueriesContext(connection) as captured:
        response = shopper.post("/api/orders", HTTP_IDEMPOTENCY_KEY="count-me")

    assert response.status_code == 201, response.json()
    verbs = [query["sql"].split()[0].upper() for query in captured.captured_queries]
    assert verbs == ["SAVEPOINT", "UPDATE", "WITH", "INSERT", "INSERT", "UPDATE", "UPDATE", "UPDATE", "RELEASE"]
    assert Order.objects.get(idempotency_key="count-me").hold_address == ""


def test_the_facts_travel_with_the_token_through_redis(redis, caps):
    shopper = from_address(verify(aged()))
    assert shopper.get("/api/cart").status_code == 200  # authenticated once: Redis holds the token, facts and all
    hot_cache.tokens.clear()  # another worker, cold
    assert remembered_user_by_id(shopper.user.id) is None and not is_established(customer_id=shopper.user.id)
    with CaptureQueriesContext(connection) as captured:
        assert shopper.get("/api/cart").status_code == 200
    assert len(captured) == 0
    assert remembered_user_by_id(shopper.user.id).remembered_facts == {"email_verified": True, "paid_order": False}
    assert is_established(customer_id=shopper.user.id)


def test_a_verification_is_learnt_when_the_shop_says_so(redis, caps, settings):
    """The facts are remembered with the token: a verification (shop's code) calls
    account_established_changed after its commit; until then the shopper is
    counted per address, as before it."""
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1
    product_with_stock(sku="MUG", price=100, available=100)
    assert outcome(buy(from_address(fresh()), redis, "MUG", "f")) == 201
    shopper = from_address(aged())
    assert outcome(buy(shopper, redis, "MUG", "before")) == "hold_limit_reached"

    verify(shopper.user)
    assert outcome(buy(shopper, redis, "MUG", "not-yet")) == "hold_limit_reached"  # remembered unverified
    account_established_changed(shopper.user.id)
    assert outcome(buy(shopper, redis, "MUG", "learnt")) == 201


def test_a_token_remembered_before_facts_were_kept_counts_per_address(redis, caps, settings):
    settings.MAX_UNPAID_UNITS_PER_ADDRESS = 1
    product_with_stock(sku="MUG", price=100, available=100)
    assert outcome(buy(from_address(fresh()), redis, "MUG", "f")) == 201
    shopper = from_address(verify(aged()))
    assert shopper.get("/api/cart").status_code == 200
    for key in redis.scan_iter("auth:token:*"):  # as an entry written by the code before this change
        entry = json.loads(redis.get(key))
        del entry["facts"]
        redis.set(key, json.dumps(entry), keepttl=True)
    hot_cache.tokens.clear()
    assert outcome(buy(shopper, redis, "MUG", "old-entry")) == "hold_limit_reached"


# --- voucher codes: RATE_LIMIT_VOUCHER_ADDRESS ---


def enter(client, code: str):
    return client.put("/api/cart/voucher", {"code": code}, format="json")


def test_voucher_entries_of_established_shoppers_count_per_account_only(redis, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "voucher": "3/hour", "voucher_address": "5/hour"}
    VoucherFactory(code="REAL")
    established = [from_address(verify(aged())) for _ in range(4)]
    assert [outcome(enter(c, f"GUESS-{n}")) for n, c in enumerate(established * 3)] == ["voucher_unknown"] * 12
    assert outcome(enter(established[0], "REAL")) == "rate_limited"  # their own window still binds

    throwaway = [from_address(fresh()) for _ in range(3)]
    answers = [outcome(enter(c, f"FRESH-{n}")) for n, c in enumerate(throwaway * 2)]
    assert answers == ["voucher_unknown"] * 5 + ["rate_limited"]  # the address's five, theirs alone
