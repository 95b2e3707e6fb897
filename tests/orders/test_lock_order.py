"""Every service that locks more than one kind of row takes them in the order
core/locks.py declares (tests/locks.py records the locking statements), and the
pair that used to break it (the payment webhook against a refund) cannot
deadlock."""

import pytest
from django.db import connection
from django.test import Client

from cart.storage import VOUCHER_FIELD, cart_key
from core.locks import LOCK_ORDER
from inventory.services import lock_stock
from orders.locks import lock_items, lock_order
from orders.models import Order, OrderStatus, Payment, Refund, Return
from orders.services import (
    approve_return,
    cancel_customer_order,
    cancel_pending_order,
    expire_unpaid_orders,
    mark_order_shipped,
    place_order,
    receive_return,
    refund_goodwill,
    refund_paid_order,
    reject_return,
    remove_order_lines,
)
from orders.services.builder import PricedLine
from orders.services.payments import capture_payment, void_payment
from orders.services.queue_admission import QueuedRequest, allocate_order_id
from orders.services.queue_writing import write_batch
from orders.services.refunds import retry_refund, submit_refund
from tests.factories import UserFactory, VoucherFactory, product_with_stock
from tests.helpers import expire_now, fill_cart, place_pending_order, post_signed, post_webhook, run_in_threads
from tests.locks import locked_tables, recording_locks
from tests.orders.conftest import SKU, queue_sale
from tests.orders.test_returns import ask, ship

pytestmark = pytest.mark.django_db


def in_order(action) -> list[list[str]]:
    """Run `action`; fail if any of its transactions locked out of the declared order."""
    with recording_locks() as record:
        action()
    assert record.transactions, "the action locked nothing: the recorder saw no locking statement"
    assert record.broken() == [], record.kinds()
    return record.kinds()


def pay(order, payment_id="pay_1", status="authorized", amount=None):
    response = post_webhook(
        Client(),
        payment_id=payment_id,
        order_id=order.id,
        amount=order.total_amount if amount is None else amount,
        status=status,
    )
    assert response.status_code == 200, response.content
    return Payment.objects.get(provider_payment_id=payment_id)


@pytest.fixture
def goods():
    product_with_stock(sku="A", price=1250, available=50)
    product_with_stock(sku="B", price=500, available=50)


def test_the_declared_order_names_tables_that_exist():
    tables = set(connection.introspection.table_names())
    assert {table for group in LOCK_ORDER for table in group} <= tables


def test_the_recorder_reads_each_kind_of_locking_statement():
    assert locked_tables('SELECT "orders"."id" FROM "orders" WHERE "orders"."id" = 1 FOR UPDATE') == ["orders"]
    assert locked_tables(
        'SELECT * FROM "orders_refund" INNER JOIN "orders_payment" ON (1=1) FOR UPDATE OF "orders_refund", '
        '"orders_payment"'
    ) == ["orders_refund", "orders_payment"]
    assert locked_tables('UPDATE "inventory" SET "available" = 1 WHERE "sku" = \'A\'') == ["inventory"]
    assert locked_tables('DELETE FROM "shop_voucherredemption" WHERE id IN (1)') == ["shop_voucherredemption"]
    assert locked_tables(
        "INSERT INTO order_unpaid_holds AS h (x) VALUES (1) ON CONFLICT (holder) DO UPDATE SET units = 1"
    ) == ["order_unpaid_holds"]
    assert locked_tables('INSERT INTO "orders" ("id") VALUES (1) ON CONFLICT DO NOTHING') == []
    assert locked_tables('SELECT "id" FROM "orders" WHERE "id" = 1') == []
    assert locked_tables('SELECT "id" FROM "orders" WHERE "id" = 1 FOR NO KEY UPDATE;') == ["orders"]
    assert locked_tables('SELECT COUNT(*) FROM (SELECT "id" FROM "orders" FOR UPDATE) subquery') == ["orders"]
    assert locked_tables('SELECT 1 FROM "orders" FOR KEY SHARE SKIP LOCKED') == ["orders"]
    assert locked_tables("UPDATE public.orders SET status = 'PAID'") == ["orders"]
    assert locked_tables('UPDATE ONLY "orders" SET status = 1') == ["orders"]
    assert locked_tables(
        "WITH a AS (INSERT INTO inventory (x) VALUES (1) RETURNING 1), b AS (INSERT INTO order_unpaid_holds AS h "
        "(y) VALUES (1) ON CONFLICT (k) DO UPDATE SET y = 1 RETURNING 1) SELECT 1"
    ) == ["order_unpaid_holds"]


def test_checkout_with_a_voucher_then_its_cancellation(redis, goods):
    customer = UserFactory()
    voucher = VoucherFactory(code="SPRING", value=10, usage_limit=5, per_customer_limit=1)
    fill_cart(redis, customer.id, {"A": 1, "B": 2})
    redis.hset(cart_key(customer.id), VOUCHER_FIELD, voucher.code)
    kinds = in_order(lambda: place_order(customer_id=customer.id, idempotency_key="k-1"))
    assert ["order_pending_counts", "order_unpaid_holds", "shop_promotion", "inventory"] == [
        kind for kind in kinds[-1] if kind != "shop_vouchercustomeruse"
    ]
    order = Order.objects.get(customer=customer)
    kinds = in_order(lambda: cancel_customer_order(customer_id=customer.id, order_id=order.id))
    assert kinds[-1][0] == "orders" and kinds[-1][-1] == "inventory"


def test_expiry(redis, goods):
    order = place_pending_order(redis, UserFactory(), {"A": 1})
    expire_now(order)
    in_order(lambda: expire_unpaid_orders(batch_size=10))
    assert Order.objects.get(id=order.id).status == OrderStatus.CANCELLED


def test_the_queue_writer(redis):
    queue_sale(100)
    customer = UserFactory()
    voucher = VoucherFactory(code="FLASH", value=10, usage_limit=5, per_customer_limit=1)
    request = QueuedRequest(
        order_id=allocate_order_id(),
        customer_id=customer.id,
        idempotency_key="k-q",
        request_hash="h",
        currency="EUR",
        lines=[PricedLine(SKU, "Flash", 1, 500)],
        queue_sku=SKU,
        discounts=[{"promotion_id": voucher.pk, "code": voucher.code}],
    )
    kinds = in_order(lambda: write_batch([request]))
    assert kinds[0][:2] == ["order_pending_counts", "shop_promotion"]


def test_the_payment_webhook_capture_void_shipping_and_a_duplicate_payment(redis, goods, provider):
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    payment = in_order(lambda: pay(order)) and Payment.objects.get(provider_payment_id="pay_1")
    in_order(lambda: mark_order_shipped(order_id=order.id))
    in_order(lambda: capture_payment(payment=payment))
    in_order(lambda: pay(order, payment_id="pay_2", status="captured"))  # a duplicate: refunded
    assert Refund.objects.get().payment.provider_payment_id == "pay_2"

    other = place_pending_order(redis, UserFactory(), {"B": 1})
    pay(other, payment_id="pay_3")
    in_order(lambda: cancel_pending_order(order_id=other.id))  # paid, its money held: claimed for a void
    in_order(lambda: void_payment(payment=Payment.objects.get(provider_payment_id="pay_3")))


def test_a_providers_own_capture_of_a_known_payment(redis, goods, provider):
    order = place_pending_order(redis, UserFactory(), {"A": 3})
    pay(order, payment_id="pay_auto")
    in_order(lambda: remove_order_lines(order_id=order.id, lines={"A": 1}))
    in_order(lambda: pay(order, payment_id="pay_auto", status="captured", amount=3750))
    assert Refund.objects.get().reason == "excess_capture"


def test_refunds_and_their_confirmations(redis, goods, provider):
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    pay(order, status="succeeded")
    kinds = in_order(lambda: refund_paid_order(order_id=order.id))
    assert kinds[0][:3] == ["orders", "order_items", "orders_payment"]

    shipped = place_pending_order(redis, UserFactory(), {"A": 2})
    ship(shipped, payment_id="pay_s")
    in_order(lambda: refund_goodwill(order_id=shipped.id, amount=100, note="late"))
    refund = Refund.objects.get(order=shipped)
    submit_refund(refund_id=refund.id)
    failed = {
        "type": "refund",
        "refund_id": refund.id,
        "payment_id": "pay_s",
        "amount": 100,
        "currency": "EUR",
        "status": "failed",
    }
    in_order(lambda: post_signed(Client(), failed))
    in_order(lambda: retry_refund(refund_id=refund.id))


def test_returns_and_removed_lines(redis, goods, provider):
    from tests.helpers import shopper_client

    client = shopper_client()
    order = place_pending_order(redis, client.user, {"A": 2, "B": 1})
    ship(order, payment_id="pay_r")
    kinds = in_order(lambda: ask(client, order, [{"sku": "A", "quantity": 1}]))
    assert kinds[0][0] == "orders"  # the order first, then its lines
    returned = Return.objects.get()
    in_order(lambda: approve_return(return_id=returned.id))
    in_order(lambda: receive_return(return_id=returned.id, conditions={"A": "restock"}))
    ask(client, order, [{"sku": "B", "quantity": 1}])
    in_order(lambda: reject_return(return_id=Return.objects.get(status=Return.Status.REQUESTED).id))

    paid = place_pending_order(redis, UserFactory(), {"A": 2, "B": 1})
    pay(paid, payment_id="pay_l")
    in_order(lambda: remove_order_lines(order_id=paid.id, lines={"B": 1}))


def test_the_recorder_fails_a_service_made_to_lock_out_of_order(redis, goods, provider, monkeypatch):
    from orders.services import amendments

    paid = place_pending_order(redis, UserFactory(), {"A": 2, "B": 1})
    pay(paid, payment_id="pay_x")

    def payment_before_items(*, order_id):
        Payment.objects.select_for_update().filter(order_id=order_id).exists()
        return lock_items(order_id=order_id)

    monkeypatch.setattr(amendments, "lock_items", payment_before_items)
    with recording_locks() as record:
        remove_order_lines(order_id=paid.id, lines={"B": 1})
    assert record.broken() == ["order_items locked after orders_payment"]

    def backwards():
        lock_stock(["A"])
        lock_order(paid.id)

    with recording_locks() as record:
        backwards()
    assert record.broken() == []  # two statements outside a transaction: each its own
    with recording_locks() as record, __import__("django.db").db.transaction.atomic():
        backwards()
    assert record.broken() == ["orders locked after inventory"]


@pytest.mark.django_db(transaction=True)
def test_a_providers_capture_webhook_and_a_removal_of_lines_of_the_same_order_at_once(redis, provider, monkeypatch):
    """Real connections, the interleaving forced: the webhook holds its locks
    while staff remove a line. It used to lock the payment, then wait on the
    order (its refund's insert) while the removal held the order and waited on
    the payment: PostgreSQL killed one. Now both lock the order first."""
    import threading
    import time

    from orders.services import payments

    product_with_stock(sku="A", price=1250, available=50)
    order = place_pending_order(redis, UserFactory(), {"A": 3}, key="dl")
    pay(order, payment_id="pay_dl")
    remove_order_lines(order_id=order.id, lines={"A": 1})  # 3750 authorized, the order now 2500
    inside, real = threading.Event(), payments._captured_by_the_provider

    def slow(known, **kwargs):
        inside.set()
        time.sleep(0.5)  # holding what the webhook locked, while the removal starts
        return real(known, **kwargs)

    monkeypatch.setattr(payments, "_captured_by_the_provider", slow)
    body = {"payment_id": "pay_dl", "order_id": order.id, "amount": 3750, "currency": "EUR", "status": "captured"}

    def removal():
        assert inside.wait(10)
        return remove_order_lines(order_id=order.id, lines={"A": 1}).total_amount

    assert run_in_threads([lambda: post_signed(Client(), body).status_code, removal]) == [200, 1250]
    refunds = sorted(Refund.objects.filter(order=order).values_list("reason", "amount"))
    assert refunds == [("excess_capture", 1250), ("lines_cancelled", 1250)]
    payment = Payment.objects.get(provider_payment_id="pay_dl")
    assert (payment.captured_amount, payment.refunded_amount) == (3750, 2500)
    connection.close()
