"""The orders' and lines' indexes (migration orders 0013): every index is written on
every order and line, so each one here has a query that needs it, and the foreign
keys stay constraints when their own indexes are gone."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def _rows(sql: str, params: list) -> set:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def test_orders_and_lines_carry_only_the_indexes_their_queries_use():
    indexes = _rows("SELECT indexdef FROM pg_indexes WHERE tablename = ANY(%s)", [["orders", "order_items"]])
    columns = sorted(d.split(" USING btree ")[1] for d in indexes)
    assert columns == sorted(
        [
            "(id)",
            "(customer_id, idempotency_key)",
            "(customer_id, id DESC)",  # orders: key, the shopper's list
            "(expires_at) WHERE ((status)::text = 'PENDING_PAYMENT'::text)",  # expiry
            # the dashboard's count of lapsed payments (written only for an order in that status)
            "(id) WHERE ((status)::text = 'PAYMENT_LAPSED'::text)",
            "(id)",
            "(order_id, sku)",
            "(sku)",  # lines: an order's (unique), a product's
        ]
    )


def test_the_foreign_keys_stay_constraints_without_their_own_indexes():
    foreign_keys = _rows(
        "SELECT conrelid::regclass || '.' || a.attname FROM pg_constraint c "
        "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
        "WHERE c.contype = 'f' AND c.conrelid = ANY(%s::regclass[])",
        [["orders", "order_items"]],
    )
    assert {"orders.customer_id", "order_items.order_id", "order_items.sku"} <= foreign_keys
