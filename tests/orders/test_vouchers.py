"""A voucher at checkout: counted in the order's own transaction (one statement
more than a checkout without), never past its limits whatever the number of
concurrent checkouts, keys or accounts, refused with its 422 while the shopper
keeps the cart, given back exactly once when the order is cancelled or expires,
and the same rule in the queue's writer."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cart.storage import VOUCHER_FIELD, cart_key, taken_key
from inventory.services.flash_sales import gated_skus
from orders.exceptions import CartEmpty
from orders.models import Order, OrderStatus
from orders.services import place_order
from orders.services.cancellation import cancel_customer_order, expire_unpaid_orders
from outbox.models import OutboxEvent
from shop.exceptions import VoucherRefused, VoucherUsedUp
from shop.models import Promotion, VoucherCustomerUse, VoucherRedemption
from shop.selectors import cached_charges, cached_products, cached_promotions, cached_voucher
from shop.services import _remember_address, address_key, set_default_address
from tests.factories import SHIPPING_ADDRESS, UserFactory, VoucherFactory, product_with_stock
from tests.helpers import checkout, expire_now, fill_cart, run_in_threads, shopper_client
from tests.orders.conftest import SKU, drain, queue_sale, shopper_with_cart

pytestmark = pytest.mark.django_db


def fill_with_voucher(redis, customer_id: int, lines: dict[str, int], code: str) -> None:
    """The cart holds `lines` and the voucher `code`, as PUT /api/cart/voucher leaves it."""
    fill_cart(redis, customer_id, lines)
    redis.hset(cart_key(customer_id), VOUCHER_FIELD, code)


def uses(voucher: Promotion) -> int:
    return Promotion.objects.get(pk=voucher.pk).uses


def test_the_order_carries_the_voucher_and_counts_its_use(redis):
    product_with_stock(sku="MUG", price=1000, available=10)
    spring = VoucherFactory(code="SPRING", value=25, usage_limit=5, per_customer_limit=1)
    shopper = shopper_client()
    fill_cart(redis, shopper.user.id, {"MUG": 2})
    entered = shopper.put("/api/cart/voucher", {"code": "spring"}, format="json").json()

    response = checkout(shopper, key="k1")

    assert response.status_code == 201, response.content
    order = response.json()
    assert (order["subtotal"], order["total"]) == (2000, 1500) == (entered["subtotal"], entered["total"])
    assert order["discounts"] == [{"promotion_id": spring.id, "name": spring.name, "code": "SPRING", "amount": 500}]
    assert order["items"][0]["discount"] == 500
    assert uses(spring) == 1
    assert VoucherRedemption.objects.values_list("order_id", "customer_id").get() == (order["id"], shopper.user.id)
    [created] = OutboxEvent.objects.filter(event_type="OrderCreated")
    assert created.payload["discounts"] == order["discounts"] and created.payload["total"] == 1500
    # A second order of this shopper's: the per-customer limit says no, and the cart stays.
    fill_cart(redis, shopper.user.id, {"MUG": 1})
    shopper.put("/api/cart/voucher", {"code": "SPRING"}, format="json")  # refused: used by this shopper
    redis.hset(cart_key(shopper.user.id), VOUCHER_FIELD, "SPRING")  # as if entered before the first order
    refused = checkout(shopper, key="k2")
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "voucher_used_up")
    assert redis.hgetall(cart_key(shopper.user.id)) == {b"MUG": b"1"}  # the lines back; the spent voucher not
    assert uses(spring) == 1 and Order.objects.count() == 1


def test_a_voucher_that_ended_since_it_was_entered_is_refused_and_the_cart_kept(
    redis, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    product_with_stock(sku="MUG", price=1000, available=10)
    spring = VoucherFactory(code="SPRING")
    shopper = shopper_client()
    fill_with_voucher(redis, shopper.user.id, {"MUG": 1}, "SPRING")
    with django_capture_on_commit_callbacks(execute=True):
        spring.ends_at = timezone.now()
        spring.save()

    refused = checkout(shopper, key="k1")

    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "voucher_expired")
    assert redis.hget(cart_key(shopper.user.id), "MUG") == b"1" and not redis.exists(taken_key(shopper.user.id))
    assert shopper.delete("/api/cart/voucher").status_code == 204
    assert checkout(shopper, key="k2").json()["total"] == 1000  # without it, the cart checks out


@pytest.mark.parametrize("address_in_body", [True, False])
def test_a_voucher_costs_checkout_one_statement(shopper, redis, address_in_body):
    """The warm checkout of test_checkout_statement_count_is_k_plus_6, with a
    voucher: its use, the shopper's count and the redemption in one more statement,
    before the stock (the voucher's row is locked before any stock row)."""
    for sku in ("A", "B", "C"):
        product_with_stock(sku=sku, available=5)
    VoucherFactory(code="SPRING", usage_limit=10, per_customer_limit=1)
    gated_skus(), cached_products(skus=["A", "B", "C"]), cached_promotions(), cached_voucher("SPRING")
    cached_charges()
    set_default_address(customer_id=shopper.user.id, address=SHIPPING_ADDRESS)
    _remember_address(redis, address_key(shopper.user.id), SHIPPING_ADDRESS)
    counts = {}
    for key, code in (("plain", None), ("voucher", "SPRING")):
        fill_cart(redis, shopper.user.id, {"A": 1, "B": 1, "C": 1})
        if code:
            redis.hset(cart_key(shopper.user.id), VOUCHER_FIELD, code)
        with CaptureQueriesContext(connection) as captured:
            place_order(
                customer_id=shopper.user.id,
                idempotency_key=key,
                shipping_address=SHIPPING_ADDRESS if address_in_body else None,
            )
        counts[key] = [query["sql"].split()[0].upper() for query in captured.captured_queries]
    plain = ["SAVEPOINT", "UPDATE", "WITH", "INSERT", "INSERT", "UPDATE", "UPDATE", "UPDATE", "RELEASE"]
    assert counts["plain"] == plain
    assert counts["voucher"] == counts["plain"][:5] + ["WITH"] + counts["plain"][5:]


def _checkout_outcome(customer_id: int, key: str) -> str:
    try:
        place_order(customer_id=customer_id, idempotency_key=key, shipping_address=SHIPPING_ADDRESS)
        return "ordered"
    except VoucherUsedUp:
        return "used_up"
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_1000_shoppers_at_once_with_a_voucher_of_100_uses_make_exactly_100_orders_with_it(redis, settings):
    """Every checkout at once (32 threads, each with its own connection, as many as
    the database takes with room to spare): the hundredth use is the last; the
    others are refused with voucher_used_up and find their carts' lines back
    (without the voucher, which has no use left)."""
    product_with_stock(sku="MUG", price=1000, available=1000)
    spring = VoucherFactory(code="SPRING", usage_limit=100, per_customer_limit=1)
    user = get_user_model()
    shoppers = user.objects.bulk_create([user(username=f"shopper-{i}") for i in range(1000)])
    pipe = redis.pipeline()
    for shopper in shoppers:
        pipe.hset(cart_key(shopper.id), mapping={"MUG": 1, VOUCHER_FIELD: "SPRING"})
    pipe.execute()
    with ThreadPoolExecutor(32) as pool:
        outcomes = list(pool.map(lambda s: _checkout_outcome(s.id, f"k-{s.id}"), shoppers))

    assert outcomes.count("ordered") == 100 and outcomes.count("used_up") == 900
    assert uses(spring) == 100 and VoucherRedemption.objects.count() == 100
    orders = Order.objects.all()
    assert orders.count() == 100 and all(o.discounts[0]["code"] == "SPRING" for o in orders)
    assert sorted(VoucherRedemption.objects.values_list("order_id", flat=True)) == sorted(o.id for o in orders)
    refused = [s for s, outcome in zip(shoppers, outcomes, strict=True) if outcome == "used_up"]
    assert all(redis.hgetall(cart_key(s.id)) == {b"MUG": b"1"} for s in refused)  # each kept the lines
    assert VoucherCustomerUse.objects.count() == 100


@pytest.mark.django_db(transaction=True)
def test_one_shopper_checking_out_under_20_keys_at_once_uses_a_once_a_shopper_voucher_once(redis, settings):
    """Twenty checkouts of one shopper, each refilling the cart (with the voucher)
    and trying again while another one holds it, until each is answered."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 50
    product_with_stock(sku="MUG", price=1000, available=100)
    spring = VoucherFactory(code="SPRING", per_customer_limit=1)  # no limit in all: only the shopper's
    customer = UserFactory()

    def attempt(key: str):
        def run():
            for _ in range(200):
                redis.hset(cart_key(customer.id), mapping={"MUG": 1, VOUCHER_FIELD: "SPRING"})
                try:
                    place_order(customer_id=customer.id, idempotency_key=key)
                    return "ordered"
                except VoucherUsedUp:
                    return "used_up"
                except CartEmpty:  # another key holds the cart right now
                    continue
            return "gave up"

        return run

    outcomes = run_in_threads([attempt(f"key-{i}") for i in range(20)])
    assert sorted(outcomes) == ["ordered"] + ["used_up"] * 19
    assert uses(spring) == 1 and Order.objects.count() == 1
    assert VoucherCustomerUse.objects.values_list("uses", "cap").get() == (1, 1)
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_racing_the_expiry_gives_the_use_back_exactly_once(redis):
    product_with_stock(sku="MUG", price=1000, available=100)
    spring = VoucherFactory(code="SPRING", usage_limit=10, per_customer_limit=1)
    for round_ in range(5):
        customer = UserFactory()
        fill_with_voucher(redis, customer.id, {"MUG": 1}, "SPRING")
        order = place_order(customer_id=customer.id, idempotency_key=f"r{round_}").order
        assert uses(spring) == 1
        expire_now(order)

        def cancel(customer=customer, order=order):
            try:
                cancel_customer_order(customer_id=customer.id, order_id=order.id)
                return "cancelled"
            except Exception as refused:  # noqa: BLE001 - the expiry won: not cancellable
                return refused.__class__.__name__

        outcomes = run_in_threads([cancel, lambda: expire_unpaid_orders()])
        assert Order.objects.get(pk=order.pk).status == OrderStatus.CANCELLED
        assert OutboxEvent.objects.filter(event_type="OrderCancelled", aggregate_id=str(order.id)).count() == 1
        assert uses(spring) == 0, outcomes
        assert not VoucherRedemption.objects.exists()
        assert VoucherCustomerUse.objects.get(customer=customer).uses == 0
    connection.close()


def test_a_cancelled_order_gives_its_use_back_and_the_shopper_may_use_it_again(redis):
    product_with_stock(sku="MUG", price=1000, available=10)
    once = VoucherFactory(code="ONCE", usage_limit=1, per_customer_limit=1)
    shopper = shopper_client()
    fill_with_voucher(redis, shopper.user.id, {"MUG": 1}, "ONCE")
    first = checkout(shopper, key="k1").json()
    assert shopper.post(f"/api/orders/{first['id']}/cancel").status_code == 200
    assert uses(once) == 0
    fill_with_voucher(redis, shopper.user.id, {"MUG": 1}, "ONCE")
    again = checkout(shopper, key="k2")
    assert again.status_code == 201 and again.json()["discounts"][0]["code"] == "ONCE"
    assert uses(once) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.kafka
@pytest.mark.usefixtures("queue_topic")
def test_the_queue_writer_counts_a_voucher_as_checkout_does(redis):
    """Five queued checkouts with a voucher of three uses: the writer writes three
    with it and rejects two (voucher_used_up), whose carts (without the spent
    voucher) and units come back."""
    queue_sale(10)
    spring = VoucherFactory(code="SPRING", usage_limit=3, per_customer_limit=1)
    clients = [shopper_with_cart(redis, {SKU: 1}) for _ in range(5)]
    for client in clients:
        redis.hset(cart_key(client.user.id), VOUCHER_FIELD, "SPRING")
    queued = [client.post("/api/orders", HTTP_IDEMPOTENCY_KEY="q") for client in clients]
    assert [answer.status_code for answer in queued] == [202] * 5
    assert all(answer.json()["discounts"][0]["code"] == "SPRING" for answer in queued)

    drain(5)

    statuses = [Order.objects.get(pk=answer.json()["id"]).status for answer in queued]
    assert sorted(statuses) == [OrderStatus.PENDING_PAYMENT] * 3 + [OrderStatus.REJECTED] * 2
    rejected = Order.objects.filter(status=OrderStatus.REJECTED)
    assert set(rejected.values_list("rejection_reason", flat=True)) == {"voucher_used_up"}
    assert uses(spring) == 3 and VoucherRedemption.objects.count() == 3
    written = set(Order.objects.filter(status=OrderStatus.PENDING_PAYMENT).values_list("id", flat=True))
    assert set(VoucherRedemption.objects.values_list("order_id", flat=True)) == written
    for order in rejected:
        assert redis.hgetall(cart_key(order.customer_id)) == {SKU.encode(): b"1"}


def test_a_voucher_refusal_is_counted_as_a_checkout_refusal(redis):
    from orders.metrics import CHECKOUT_REFUSALS

    product_with_stock(sku="MUG", price=1000, available=10)
    VoucherFactory(code="SPENT", usage_limit=1, uses=1)
    customer = UserFactory()
    fill_with_voucher(redis, customer.id, {"MUG": 1}, "SPENT")
    before = CHECKOUT_REFUSALS.labels("voucher_used_up")._value.get()
    with pytest.raises(VoucherRefused):
        place_order(customer_id=customer.id, idempotency_key="k")
    assert CHECKOUT_REFUSALS.labels("voucher_used_up")._value.get() == before + 1


def test_a_voucher_refused_for_another_reason_comes_back_with_the_cart(redis, django_capture_on_commit_callbacks):
    """Only a voucher with no use left is dropped: one that ended comes back, and
    the cart says why it no longer applies."""
    from django.utils import timezone

    product_with_stock(sku="MUG", price=1000, available=10)
    spring = VoucherFactory(code="SPRING")
    shopper = shopper_client()
    fill_with_voucher(redis, shopper.user.id, {"MUG": 1}, "SPRING")
    with django_capture_on_commit_callbacks(execute=True):
        spring.ends_at = timezone.now()
        spring.save()
    assert checkout(shopper, key="k1").json()["error"]["code"] == "voucher_expired"
    assert shopper.get("/api/cart").json()["voucher"]["error"]["code"] == "voucher_expired"


def _someone_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # else read once per transaction
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_the_queue_writer_and_a_checkout_of_one_shopper_with_one_voucher_cannot_deadlock(redis):
    """A checkout holds the shopper's pending-order slot and is about to redeem the
    voucher while the writer's batch, with a queued order of that shopper using the
    same voucher, begins. Every writer locks counters, then vouchers, then stock:
    the writer waits for the slot before it touches the voucher, and both go
    through. (Locking the voucher first, as it once did, the writer then waited for
    the counter the checkout held while the checkout waited for the voucher.)"""
    import threading

    from django.db import transaction

    from orders.models import PendingOrderCount
    from orders.services.builder import PricedLine
    from orders.services.queue_admission import QueuedRequest, allocate_order_id
    from orders.services.queue_writing import write_batch
    from orders.services.slots import take_pending_slot
    from shop.promotions import redeem_voucher
    from tests.helpers import wait_until

    queue_sale(10)
    spring = VoucherFactory(code="SPRING")
    customer = UserFactory()
    PendingOrderCount.objects.get_or_create(customer_id=customer.id)  # as every account has
    applied = {"promotion_id": spring.id, "name": spring.name, "code": "SPRING", "amount": 50}
    queued = QueuedRequest(
        order_id=allocate_order_id(),
        customer_id=customer.id,
        idempotency_key="q",
        request_hash="h",
        currency="EUR",
        lines=[PricedLine(SKU, "Flash", 1, 500, 50)],
        queue_sku=SKU,
        discounts=[applied],
    )
    slot_held = threading.Event()

    def checkout_holding_the_slot():
        with transaction.atomic():
            assert take_pending_slot(customer_id=customer.id)
            slot_held.set()
            assert wait_until(_someone_waits_for_a_lock, 10)  # the writer, blocked on what this holds
            redeem_voucher(voucher_id=spring.id, customer_id=customer.id, order_id=10**9)
        return "redeemed"

    def write():
        assert slot_held.wait(10)
        return len(write_batch([queued], clean_up_on_commit=False).written)

    assert run_in_threads([checkout_holding_the_slot, write]) == ["redeemed", 1]
    assert uses(spring) == 2
    connection.close()


def test_a_refund_gives_back_what_was_paid_after_the_voucher_and_keeps_its_use(redis):
    from django.test import Client

    from orders.services import refund_paid_order
    from tests.helpers import post_webhook

    product_with_stock(sku="MUG", price=1000, available=10)
    spring = VoucherFactory(code="SPRING", value=15, usage_limit=5)
    customer = UserFactory()
    fill_with_voucher(redis, customer.id, {"MUG": 3}, "SPRING")
    order = place_order(customer_id=customer.id, idempotency_key="k1", shipping_address=SHIPPING_ADDRESS).order
    assert order.total_amount == 3 * (1000 - 150)
    assert post_webhook(Client(), payment_id="p1", order_id=order.id, amount=2550).json()["outcome"] == "applied"
    refund = refund_paid_order(order_id=order.id)
    assert (refund.amount, refund.currency) == (2550, "EUR")  # what the shopper paid, not the catalog's 3,000
    assert uses(spring) == 1  # a refunded order used the voucher: its use stays counted
