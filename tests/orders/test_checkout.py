"""orders/services/checkout.py: place_order under real concurrency (each thread with
its own PostgreSQL connection, racing for stock), the pending-order slots that stop
one account hoarding stock (MAX_PENDING_ORDERS_PER_CUSTOMER), and its statements."""

import random

import pytest
from django.db import connection
from django.db.models import Count, Sum
from django.test.utils import CaptureQueriesContext

from inventory.models import Stock
from inventory.services.flash_sales import gated_skus
from orders.exceptions import TooManyPendingOrders
from orders.models import Order, OrderItem, OrderStatus, PendingOrderCount
from orders.services import cancel_customer_order, expire_unpaid_orders, place_order
from orders.services.builder import OrderDraft, price_cart
from orders.services.checkout import _create_order
from outbox.models import OutboxEvent
from shop.selectors import cached_charges, cached_products, cached_promotions
from shop.services import _remember_address, address_key, set_default_address
from tests.factories import SHIPPING_ADDRESS, UserFactory, product_with_stock
from tests.helpers import checkout, expire_now, fill_cart, post_webhook, run_in_threads, shopper_client

# --- real threads, each with its own PostgreSQL connection, racing for stock ---


def buyers(redis, count, cart_for):
    clients = []
    for i in range(count):
        client = shopper_client(UserFactory())
        fill_cart(redis, client.user.id, cart_for(i))
        clients.append(client)
    return clients


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_checkout_never_oversells_stock_5_buyers_20(redis):
    product_with_stock(sku="HOT", available=5)
    clients = buyers(redis, 20, lambda i: {"HOT": 1})
    statuses = run_in_threads([lambda c=c: checkout(c).status_code for c in clients])
    assert sorted(statuses) == [201] * 5 + [409] * 15
    stock = Stock.objects.get(product_id="HOT")
    assert (stock.available, stock.reserved) == (0, 5)
    assert Order.objects.count() == 5
    assert OutboxEvent.objects.filter(event_type="OrderCreated").count() == 5


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_checkout_never_oversells_with_mixed_quantities(redis):
    product_with_stock(sku="HOT", available=40)
    rng = random.Random(7)
    quantities = [rng.randint(1, 3) for _ in range(50)]
    clients = buyers(redis, 50, lambda i: {"HOT": quantities[i]})
    statuses = run_in_threads([lambda c=c: checkout(c).status_code for c in clients])
    assert set(statuses) <= {201, 409}
    stock = Stock.objects.get(product_id="HOT")
    sold = OrderItem.objects.aggregate(total=Sum("quantity"))["total"]
    # Never oversold (the stock's CHECKs would have made that a 500 above): each 201 is one order,
    # and every unit reserved is one those orders bought.
    assert statuses.count(201) == Order.objects.count()
    assert stock.reserved == sold == 40 - stock.available
    assert sum(q for q, s in zip(quantities, statuses, strict=True) if s == 201) == sold
    assert stock.available < 3  # demand (~100 units) outran the 40: the sale ran dry
    assert min(q for q, s in zip(quantities, statuses, strict=True) if s == 409) > stock.available


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_checkout_has_no_deadlock_between_opposite_carts(redis):
    product_with_stock(sku="A", available=40)
    product_with_stock(sku="B", available=40)
    # Insert the hash fields in opposite orders; the service must sort them anyway.
    clients = buyers(redis, 60, lambda i: {"A": 1, "B": 1} if i % 2 else {"B": 1, "A": 1})
    responses = run_in_threads([lambda c=c: checkout(c) for c in clients])
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {201, 409}, [r.json() for r in responses if r.status_code not in (201, 409)]
    assert statuses.count(201) == 40
    stocks = {s.product_id: (s.available, s.reserved) for s in Stock.objects.all()}
    assert stocks == {"A": (0, 40), "B": (0, 40)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_checkout_same_key_from_10_threads_makes_one_order(redis):
    product_with_stock(sku="A", available=100)
    user = UserFactory()
    fill_cart(redis, user.id, {"A": 2})
    clients = [shopper_client(user) for _ in range(10)]
    responses = run_in_threads([lambda c=c: checkout(c, key="double-click") for c in clients])
    assert Order.objects.count() == 1
    order = Order.objects.get()
    assert sorted(r.status_code for r in responses) == [200] * 9 + [201]
    assert {r.json()["id"] for r in responses} == {order.id}
    assert Stock.objects.get(product_id="A").reserved == 2
    assert OutboxEvent.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("address_in_body", [True, False])
def test_checkout_statement_count_is_k_plus_6(shopper, redis, address_in_body):
    """k-line cart in a warm process (prices from the hot catalog cache, as the cart
    showed them): BEGIN, UPDATE the pending-order slot, INSERT the order with its
    items (one statement), INSERT the unpaid holds (one upsert for every line and
    both holders), INSERT event, k UPDATEs (last, to hold hot rows for the
    shortest time), COMMIT = k + 6. Inside the test's own transaction, BEGIN/COMMIT
    show as SAVEPOINT/RELEASE. The token lookup belongs to authentication; the
    address comes with the request, or the saved one from Redis with the cart."""
    for sku in ("A", "B", "C"):
        product_with_stock(sku=sku, available=5)
    fill_cart(redis, shopper.user.id, {"A": 1, "B": 1, "C": 1})
    gated_skus()  # a warm process knows its flash sales
    cached_products(skus=["A", "B", "C"])  # and the products its carts show
    cached_promotions()  # and the promotions that price them
    cached_charges()  # and the tax rates and shipping methods
    set_default_address(customer_id=shopper.user.id, address=SHIPPING_ADDRESS)
    _remember_address(redis, address_key(shopper.user.id), SHIPPING_ADDRESS)  # as after the save's commit

    with CaptureQueriesContext(connection) as captured:
        result = place_order(
            customer_id=shopper.user.id,
            idempotency_key="count-me",
            shipping_address=SHIPPING_ADDRESS if address_in_body else None,
        )

    assert not result.replayed and result.order.shipping_address == SHIPPING_ADDRESS
    verbs = [query["sql"].split()[0].upper() for query in captured.captured_queries]
    assert verbs == ["SAVEPOINT", "UPDATE", "WITH", "INSERT", "INSERT", "UPDATE", "UPDATE", "UPDATE", "RELEASE"]
    assert len(verbs) == 3 + 6
    written = OrderItem.objects.filter(order=result.order).values_list("product_id", "quantity")
    assert sorted(written) == [("A", 1), ("B", 1), ("C", 1)]


@pytest.mark.django_db(transaction=True)
def test_the_saved_address_is_read_from_redis_and_follows_a_change(redis, settings):
    """Checkout reads the saved address with the cart: the database only when
    Redis has forgotten it (then Redis learns it), and a changed address ships
    the next order, never the one it replaced."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 4
    product_with_stock(sku="MUG", available=10)
    client = shopper_client()
    user = client.user
    madrid, bilbao = {**SHIPPING_ADDRESS, "city": "Madrid"}, {**SHIPPING_ADDRESS, "city": "Bilbao"}

    def order_to(key: str) -> tuple[str, list[str]]:
        fill_cart(redis, user.id, {"MUG": 1})
        with CaptureQueriesContext(connection) as captured:
            response = checkout(client, key)
        assert response.status_code == 201, response.json()
        return response.json()["shipping_address"]["city"], [q["sql"] for q in captured.captured_queries]

    assert client.put("/api/auth/me/address", madrid, format="json").status_code == 200
    city, sql = order_to("a")
    assert city == "Madrid" and not any("shop_address" in s for s in sql)  # Redis learnt it when it was saved

    redis.delete(address_key(user.id))  # evicted, or Redis restarted
    city, sql = order_to("b")
    assert city == "Madrid" and any("shop_address" in s for s in sql)
    assert redis.get(address_key(user.id)) is not None  # and learnt again
    city, sql = order_to("c")
    assert not any("shop_address" in s for s in sql)

    assert client.put("/api/auth/me/address", bilbao, format="json").status_code == 200
    assert order_to("d")[0] == "Bilbao"


# --- MAX_PENDING_ORDERS_PER_CUSTOMER: one account cannot hoard stock with unpaid orders ---


def slots(customer) -> int:
    row = PendingOrderCount.objects.filter(customer=customer).first()
    return row.pending if row else 0


def assert_slots_match_the_orders() -> None:
    real = dict(
        Order.objects.filter(status=OrderStatus.PENDING_PAYMENT)
        .values_list("customer_id")
        .annotate(n=Count("id"))
        .values_list("customer_id", "n")
    )
    counted = {c: n for c, n in PendingOrderCount.objects.values_list("customer_id", "pending") if n}
    assert counted == real


@pytest.mark.django_db
def test_the_fourth_unpaid_order_is_refused_and_writes_nothing(redis, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 3
    product_with_stock(sku="MUG", price=100, available=50)
    client = shopper_client()
    for i in range(3):
        fill_cart(redis, client.user.id, {"MUG": 5})
        assert checkout(client, key=f"k{i}").status_code == 201
    fill_cart(redis, client.user.id, {"MUG": 5})
    response = checkout(client, key="k3")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "too_many_pending_orders",
        "message": "You have too many orders awaiting payment: pay or cancel one first.",
        "details": {"limit": 3},
    }
    assert Order.objects.count() == 3 and Stock.objects.get(product_id="MUG").available == 35
    assert slots(client.user) == 3
    assert checkout(client, key="k1").status_code == 200  # a replay at the limit still answers its order
    assert slots(client.user) == 3


@pytest.mark.django_db
def test_paying_cancelling_or_expiring_gives_the_slot_back(redis, settings, client):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 1
    product_with_stock(sku="MUG", price=100, available=50)
    shopper = shopper_client()

    def order(key):
        fill_cart(redis, shopper.user.id, {"MUG": 1})
        return checkout(shopper, key=key)

    first = order("a").json()
    assert order("b").status_code == 409
    assert post_webhook(client, payment_id="p1", order_id=first["id"], amount=100).status_code == 200
    second = order("b").json()
    assert order("c").status_code == 409
    cancel_customer_order(customer_id=shopper.user.id, order_id=second["id"])
    third = order("c").json()
    expire_now(Order.objects.get(id=third["id"]))
    assert expire_unpaid_orders() == 1
    assert order("d").status_code == 201
    assert slots(shopper.user) == 1
    assert_slots_match_the_orders()


@pytest.mark.django_db(transaction=True)
def test_concurrent_checkouts_of_one_shopper_get_exactly_the_limit(settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 2
    product_with_stock(sku="MUG", price=100, available=100)
    customer = UserFactory()

    def attempt(key):
        def run():
            try:
                lines = price_cart({"MUG": 1}, country="ES").lines
                draft = OrderDraft(customer.id, key, lines, "EUR", SHIPPING_ADDRESS, 900, "192.0.2.1")
                return _create_order(draft=draft, gated={})
            except TooManyPendingOrders:
                return "refused"

        return run

    results = run_in_threads([attempt(f"key-{i}") for i in range(8)])
    assert results.count("refused") == 6
    assert Order.objects.filter(customer=customer).count() == 2 == slots(customer)
    assert Stock.objects.get(product_id="MUG").available == 98
    assert_slots_match_the_orders()
