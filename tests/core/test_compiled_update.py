"""core/db.py CompiledUpdate: an ORM UPDATE compiled once, run with fresh values,
sends what QuerySet.update sends and counts what it counts."""

import warnings
from datetime import datetime

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from core.db import CompiledUpdate
from inventory.models import Stock
from tests.factories import product_with_stock

pytestmark = pytest.mark.django_db


def take(sku, quantity):
    return (
        Stock.objects.filter(product_id=sku, available__gte=quantity),
        {"available": F("available") - quantity, "reserved": F("reserved") + quantity},
    )


def test_it_sends_what_the_orm_sends_and_counts_the_rows():
    product_with_stock(sku="A", available=3)
    compiled = CompiledUpdate(take, sku=str, quantity=int)
    orm, ours = [], []

    def into(sent):
        return lambda execute, sql, params, many, context: (
            sent.append((sql, list(params))) or execute(sql, params, many, context)
        )

    with connection.execute_wrapper(into(orm)):
        queryset, values = take("A", 2)
        assert queryset.update(**values) == 1
    with connection.execute_wrapper(into(ours)):
        assert compiled(sku="A", quantity=1) == 1
        assert compiled(sku="A", quantity=1) == 0  # the condition holds: 0 left
        assert compiled(sku="NONE", quantity=1) == 0

    stock = Stock.objects.get(product_id="A")
    assert (stock.available, stock.reserved) == (0, 3)
    (orm_sql, orm_params), (our_sql, our_params) = orm[0], ours[0]
    assert our_sql == orm_sql and our_params == [1 if p == 2 else p for p in orm_params] and "A" in our_params
    assert ours[2][1] == [1 if p == 2 else "NONE" if p == "A" else p for p in orm_params]


def test_logged_statements_show_their_values():
    """A compiled update seen by CaptureQueriesContext (the debug cursor) shows its values."""
    product_with_stock(sku="A", available=3)
    with CaptureQueriesContext(connection) as ctx:
        CompiledUpdate(take, sku=str, quantity=int)(sku="A", quantity=1)
    assert "'A'" in ctx.captured_queries[0]["sql"] and "$" not in ctx.captured_queries[0]["sql"]


@pytest.mark.parametrize(
    "build",
    [
        lambda sku, quantity: (Stock.objects.filter(product_id=sku), {"available": quantity * 2}),  # computed
        lambda sku, quantity: (Stock.objects.filter(product_id=sku)[:1], {"available": quantity}),  # update() refuses
    ],
)
def test_what_a_slot_cannot_describe_is_refused(build):
    compiled = CompiledUpdate(build, sku=str, quantity=int)
    with pytest.raises((ValueError, TypeError)):
        compiled(sku="A", quantity=1)


def test_only_int_and_str_values():
    with pytest.raises(TypeError):
        CompiledUpdate(take, sku=str, quantity=float)


def test_prepared_values_are_what_the_fields_would_give():
    """core/db.py prepares plain values in one cached step: the same values the
    field machinery gives, for every field of the models checkout writes."""
    from django.utils import timezone

    from core.db import _prepared
    from orders.models import Order, OrderItem
    from tests.factories import SHIPPING_ADDRESS

    order = Order(
        customer_id=7,
        idempotency_key="k",
        request_hash="h" * 64,
        status="PENDING_PAYMENT",
        total_amount=1500,
        currency="EUR",
        created_at=timezone.now(),
        expires_at=timezone.now(),
        shipping_address=SHIPPING_ADDRESS,
        hold_address="192.0.2.1",
        holds_units=True,
    )
    item = OrderItem(order_id=3, product_id="MUG", name="Mug", quantity=2, unit_price=750, gross=1500)
    naive = Order(
        customer_id=7,
        idempotency_key="n",
        request_hash="h" * 64,
        status="PENDING_PAYMENT",
        total_amount=1,
        currency="EUR",
        created_at=datetime(2026, 1, 2, 3, 4, 5),
        expires_at=datetime(2026, 1, 2, 3, 4, 5),
        shipping_address=None,
    )  # the field's path
    for instance in (order, item, naive):
        fields = [f for f in type(instance)._meta.concrete_fields if not f.primary_key]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # Django's "naive datetime" warning
            slow = [f.get_db_prep_save(f.pre_save(instance, add=True), connection) for f in fields]
            fast = _prepared(fields, instance)
        assert [(type(v), str(v)) for v in fast] == [(type(v), str(v)) for v in slow]


def test_any_of_finds_what_in_finds_with_one_parameter():
    """core/db.py's `__any` lookup: `= ANY(array)`, the same rows as `__in`."""
    from orders.models import Order
    from tests.factories import OrderFactory

    orders = [OrderFactory() for _ in range(3)]
    ids = [orders[0].id, orders[2].id, 10**9]
    customers = [orders[1].customer_id]
    assert set(Order.objects.filter(id__any=ids).values_list("id", flat=True)) == {orders[0].id, orders[2].id}
    by_in = list(Order.objects.filter(customer_id__in=customers))
    assert list(Order.objects.filter(customer_id__any=customers)) == by_in
    assert list(Order.objects.filter(customer__any=customers)) == [orders[1]]
    assert not Order.objects.filter(idempotency_key__any=[]).exists()
    with CaptureQueriesContext(connection) as captured:
        list(Order.objects.filter(idempotency_key__any=[o.idempotency_key for o in orders]))
    assert "= ANY(" in captured.captured_queries[0]["sql"]


@pytest.mark.django_db(transaction=True)  # closes the connection: not inside the test's transaction
def test_a_kept_cursor_per_statement_reopened_with_its_connection_and_logged_when_queries_are():
    """core/db.py execute_kept: a driver cursor per statement and connection, a new one after the
    connection is closed, and CaptureQueriesContext (a debug cursor) and execute_wrapper still see
    its statements."""
    from core.db import execute_kept

    one, two = "SELECT %s::int", "SELECT %s::int + 1"
    first = execute_kept(one, [1])
    assert first.fetchone() == (1,) and execute_kept(one, [5]) is first and first.fetchone() == (5,)
    assert execute_kept(two, [1]) is not first
    connection.close()
    again = execute_kept(one, [2])
    assert again is not first and again.fetchone() == (2,)
    seen = []
    with (
        CaptureQueriesContext(connection) as captured,
        connection.execute_wrapper(
            lambda execute, sql, params, many, context: seen.append(params) or execute(sql, params, many, context)
        ),
    ):
        assert execute_kept(two, [3]).fetchone() == (4,)
    assert [q["sql"] for q in captured.captured_queries] == ["SELECT 3::int + 1"] and seen == [[3]]


@pytest.mark.django_db
def test_a_statement_run_again_keeps_the_drivers_adapters_between_other_statements():
    """What a cursor per statement is for: psycopg keeps a cursor's adapters (its Transformer) only
    while the cursor runs the same query object again, so checkout's five statements in turn on one
    cursor looked every parameter's adapter up afresh on each."""
    from core.db import execute_kept

    one, two = "SELECT %s::int, %s::text", "SELECT %s::bigint"
    adapters = execute_kept(one, [1, "a"])._tx
    execute_kept(two, [2])
    cursor = execute_kept(one, [3, "b"])
    assert cursor._tx is adapters and cursor.fetchone() == (3, "b")


@pytest.mark.django_db
def test_kept_cursors_start_over_past_their_cap():
    from core import db

    statements = [f"SELECT {n}" for n in range(db._KEPT_PER_CONNECTION + 1)]
    cursors = [db.execute_kept(sql, []) for sql in statements]
    assert len({id(c) for c in cursors}) == len(statements)
    kept = connection._kept_cursors[1]  # started over at the cap: the first ones are gone
    assert statements[-1] in kept and statements[0] not in kept and len(kept) < db._KEPT_PER_CONNECTION
    assert db.execute_kept(statements[0], []) is not cursors[0]


@pytest.mark.django_db
def test_the_lean_path_raises_djangos_errors_and_refuses_a_broken_transaction():
    """Without logging or wrappers execute_kept skips Django's CursorWrapper, not what it does."""
    from django.db import IntegrityError, transaction
    from django.db.transaction import TransactionManagementError

    from core.db import execute_kept

    assert not connection.queries_logged and not connection.execute_wrappers
    with transaction.atomic():
        with pytest.raises(IntegrityError):  # django.db's, not psycopg's: CHECK (pending >= 0)
            execute_kept("INSERT INTO order_pending_counts (customer_id, pending) VALUES (%s, -1)", [-1])
        connection.needs_rollback = True  # as Django marks an atomic block after an error
        with pytest.raises(TransactionManagementError):
            execute_kept("SELECT %s::int", [1])
        transaction.set_rollback(True)
