"""The order's statuses move only along the transition table, each move one
conditional UPDATE."""

import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orders.models import Order, OrderStatus
from orders.transitions import TRANSITIONS, may_move, move_orders, sources
from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


def order_in(status: OrderStatus, key: str) -> Order:
    now = timezone.now()
    return OrderFactory(idempotency_key=key, status=status, total_amount=100, created_at=now, expires_at=now)


@pytest.mark.parametrize("before,after", list(itertools.permutations(OrderStatus, 2)))
def test_an_order_moves_only_where_the_table_allows(before, after):
    order = order_in(before, f"{before}-{after}")
    allowed = (before, after) in TRANSITIONS
    try:
        moved = move_orders([order.id], after)
    except ValueError:  # a status nothing may move to (PENDING_PAYMENT)
        assert not allowed and not any(target == after for _, target in TRANSITIONS)
        return
    order.refresh_from_db()
    assert moved == (1 if allowed else 0)
    assert order.status == (after if allowed else before)
    assert may_move(before, after) is allowed


def test_a_move_is_one_conditional_update_and_stamps_the_moment():
    order = order_in(OrderStatus.PENDING_PAYMENT, "stamp")
    with CaptureQueriesContext(connection) as captured:
        assert move_orders([order.id], OrderStatus.CANCELLED) == 1
    [update] = captured.captured_queries
    assert update["sql"].startswith("UPDATE") and "status" in update["sql"].split("WHERE")[1]
    order.refresh_from_db()
    assert order.cancelled_at is not None


def test_a_batch_moves_only_the_orders_still_in_a_source_status():
    pending = [order_in(OrderStatus.PENDING_PAYMENT, f"p{i}") for i in range(3)]
    shipped = order_in(OrderStatus.SHIPPED, "shipped")
    assert move_orders([o.id for o in pending] + [shipped.id], OrderStatus.CANCELLED) == 3
    shipped.refresh_from_db()
    assert shipped.status == OrderStatus.SHIPPED


def test_every_status_an_order_is_not_written_in_is_reachable_and_final_ones_lead_nowhere():
    reachable = {after for _, after in TRANSITIONS}
    # PENDING_PAYMENT again: staff ask the shopper to pay an order whose payment lapsed.
    assert reachable == set(OrderStatus) - {OrderStatus.REJECTED}
    assert sources(OrderStatus.PENDING_PAYMENT) == [OrderStatus.PAYMENT_LAPSED]
    assert sources(OrderStatus.REFUNDED) == [OrderStatus.PAID, OrderStatus.SHIPPED]
    assert {after for before, after in TRANSITIONS if before == OrderStatus.SHIPPED} == {OrderStatus.REFUNDED}
    for final in (OrderStatus.CANCELLED, OrderStatus.REFUNDED, OrderStatus.REJECTED):
        assert not any(before == final for before, _ in TRANSITIONS)
