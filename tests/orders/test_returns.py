"""Returns (orders/services/returns.py): the shopper's request through the API,
staff approving, rejecting and receiving line by line, the stock ledger and
the refund at the price paid; racing returns of one line."""

from datetime import timedelta
from itertools import product as every

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from inventory.models import Stock, StockMovement
from inventory.services import stock_audit
from orders.exceptions import ReturnNotDecidable, ReturnNotReceivable
from orders.models import Order, OrderItem, OrderStatus, Payment, Refund, Return
from orders.services import approve_return, mark_order_shipped, receive_return, reject_return
from outbox.models import OutboxEvent
from tests.factories import product_with_stock
from tests.helpers import place_pending_order, post_webhook, run_in_threads, shopper_client

pytestmark = pytest.mark.django_db


def ship(order, payment_id: str = "pay_r") -> Payment:
    """Paid (authorized), then shipped: its money captured first."""
    response = post_webhook(
        Client(), payment_id=payment_id, order_id=order.id, amount=order.total_amount, status="authorized"
    )
    assert response.status_code == 200, response.content
    mark_order_shipped(order_id=order.id)
    payment = Payment.objects.get(provider_payment_id=payment_id)
    assert payment.status == Payment.Status.CAPTURED
    return payment


@pytest.fixture
def shipped(redis, provider):
    """A shopper (API client) and their shipped, captured order: 3 x "A" at 1000
    with 100 off the line (2900), and 1 x "B" at 599."""
    product_with_stock(sku="A", price=1000, available=10)
    product_with_stock(sku="B", price=599, available=10)
    client = shopper_client()
    order = place_pending_order(redis, client.user, {"A": 3, "B": 1})
    OrderItem.objects.filter(order=order, product_id="A").update(discount=100, gross=2900)
    Order.objects.filter(id=order.id).update(total_amount=3499)
    order.refresh_from_db()
    ship(order)
    return client, order


def ask(client, order, items, reason="too small"):
    return client.post(f"/api/orders/{order.id}/returns", {"items": items, "reason": reason}, format="json")


def error(response) -> str:
    return response.json()["error"]["code"]


def test_a_line_refunds_exactly_what_it_cost_whatever_the_parts_and_each_part_its_share():
    for quantity, price, discount in every([1, 2, 3, 7], [1, 999, 1000], [0, 1, 100, 333]):
        if discount > quantity * price:
            continue
        total = quantity * price - discount
        for tax in {0, total // 6, total // 3}:  # in the price (included), or on it (excluded)
            for gross in (total, total + tax):
                item = OrderItem(quantity=quantity, unit_price=price, discount=discount, tax=tax, gross=gross)
                for cut in range(quantity + 1):
                    first, rest = {"first": 0, "count": cut}, {"first": cut, "count": quantity - cut}
                    parts = [item.price_of_units(**first), item.price_of_units(**rest)]
                    assert sum(parts) == gross
                    assert 0 <= parts[0] - cut * gross / quantity < 1  # the first part rounds up, by less than a cent
                    taxes = [item.tax_of_units(**first), item.tax_of_units(**rest)]
                    assert sum(taxes) == tax and abs(taxes[0] - cut * tax / quantity) < 1
                    assert all(0 <= part_tax <= part for part_tax, part in zip(taxes, parts, strict=True))


def test_the_shopper_asks_to_return_units_and_sees_the_return(shipped):
    client, order = shipped
    response = ask(client, order, [{"sku": "A", "quantity": 2}])
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "REQUESTED" and body["order_id"] == order.id and body["reason"] == "too small"
    assert body["lines"] == [{"sku": "A", "quantity": 2, "condition": ""}] and body["refund_amount"] is None
    assert [r["id"] for r in client.get(f"/api/orders/{order.id}/returns").json()] == [body["id"]]
    assert OrderItem.objects.get(order=order, product_id="A").in_returns == 2
    [requested] = OutboxEvent.objects.filter(event_type="ReturnRequested")
    assert requested.payload["lines"] == [{"sku": "A", "quantity": 2}]


def test_a_return_shows_its_lines_in_one_query_and_the_list_costs_the_same_for_any_number(shipped):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from orders.services.returns import _shown, customer_returns

    client, order = shipped
    first = ask(client, order, [{"sku": "A", "quantity": 1}]).json()["id"]
    ask(client, order, [{"sku": "A", "quantity": 1}, {"sku": "B", "quantity": 1}])
    returned = Return.objects.get(id=first)
    with CaptureQueriesContext(connection) as shown:
        _shown(returned)
    assert len(shown) == 1 and [line.item.product_id for line in returned.lines.all()] == ["A"]
    with CaptureQueriesContext(connection) as listed:
        returns = customer_returns(customer_id=client.user.id, order_id=order.id)
    assert len(listed) == 3  # the order is theirs; the returns with their refunds; every line with its item
    assert sorted(line.item.product_id for r in returns for line in r.lines.all()) == ["A", "A", "B"]


def test_what_cannot_be_returned_is_refused_with_its_code_and_nothing_written(shipped, redis):
    client, order = shipped
    assert error(ask(client, order, [{"sku": "Z", "quantity": 1}])) == "sku_not_on_order"
    refused = ask(client, order, [{"sku": "B", "quantity": 1}, {"sku": "A", "quantity": 4}])
    assert refused.status_code == 422 and error(refused) == "too_many_units"
    assert not Return.objects.exists() and OrderItem.objects.filter(in_returns__gt=0).count() == 0  # B not kept
    assert ask(client, order, [{"sku": "A", "quantity": 1}, {"sku": "A", "quantity": 1}]).status_code == 400
    assert ask(client, order, [{"sku": "A", "quantity": 0}]).status_code == 400
    assert ask(client, order, []).status_code == 400
    assert ask(shopper_client(), order, [{"sku": "A", "quantity": 1}]).status_code == 404  # someone else's

    assert ask(client, order, [{"sku": "A", "quantity": 3}, {"sku": "B", "quantity": 1}]).status_code == 201
    nothing = ask(client, order, [{"sku": "A", "quantity": 1}])
    assert nothing.status_code == 409 and error(nothing) == "nothing_to_return"

    pending = place_pending_order(redis, client.user, {"B": 1}, key="k-unshipped")
    assert error(ask(client, pending, [{"sku": "B", "quantity": 1}])) == "order_not_shipped"


@pytest.mark.parametrize("quantity", ["1", 1.0, True, 1.5])
def test_a_quantity_is_a_json_integer_as_in_the_cart(shipped, quantity):
    client, order = shipped
    refused = ask(client, order, [{"sku": "A", "quantity": quantity}])
    assert refused.status_code == 400 and error(refused) == "invalid", refused.content
    assert "A JSON integer is required." in refused.content.decode()  # the cart's words (core.fields)
    assert not Return.objects.exists() and OrderItem.objects.filter(in_returns__gt=0).count() == 0


def test_the_window_closes_return_window_days_after_shipping(shipped, settings):
    client, order = shipped
    settings.RETURN_WINDOW_DAYS = 30
    Order.objects.filter(id=order.id).update(shipped_at=timezone.now() - timedelta(days=30, minutes=1))
    closed = ask(client, order, [{"sku": "A", "quantity": 1}])
    assert closed.status_code == 409 and error(closed) == "return_window_closed"
    Order.objects.filter(id=order.id).update(shipped_at=timezone.now() - timedelta(days=29))
    assert ask(client, order, [{"sku": "A", "quantity": 1}]).status_code == 201


def test_received_units_are_restocked_or_written_off_through_the_ledger_and_refunded_at_the_price_paid(shipped):
    client, order = shipped
    first = ask(client, order, [{"sku": "A", "quantity": 2}, {"sku": "B", "quantity": 1}]).json()["id"]
    before = {s.product_id: s.available for s in Stock.objects.all()}
    approve_return(return_id=first)
    received = receive_return(return_id=first, conditions={"A": "restock", "B": "damaged"})

    assert received.status == Return.Status.RECEIVED and received.received_at
    after = {s.product_id: s.available for s in Stock.objects.all()}
    assert after == {"A": before["A"] + 2, "B": before["B"]}  # the damaged unit is not on sale
    assert sorted(
        StockMovement.objects.filter(reason__in=["returned", "damaged"]).values_list("product_id", "reason", "delta")
    ) == [("A", "returned", 2), ("B", "damaged", -1), ("B", "returned", 1)]
    audit = {row["sku"]: row for row in stock_audit(skus=["A", "B"])}
    assert set(audit) == {"A", "B"} and all(row["difference"] == 0 for row in audit.values())
    assert audit["A"]["available"] == after["A"] and audit["A"]["shipped"] == 3  # shipped keeps what left

    refund = received.refund  # 2 of A: 2000 - 100 x 2 // 3 = 1934; B: 599
    assert (refund.amount, refund.reason, refund.status) == (1934 + 599, Refund.Reason.RETURN, Refund.Status.REQUESTED)
    assert refund.lines == [
        {"sku": "A", "quantity": 2, "amount": 1934, "tax": 0},
        {"sku": "B", "quantity": 1, "amount": 599, "tax": 0},
    ]
    [requested] = OutboxEvent.objects.filter(event_type="RefundRequested")
    assert requested.payload["lines"] == refund.lines and requested.payload["amount"] == 2533
    [arrived] = OutboxEvent.objects.filter(event_type="ReturnReceived")
    assert arrived.payload["lines"] == [
        {"sku": "A", "quantity": 2, "condition": "restock"},
        {"sku": "B", "quantity": 1, "condition": "damaged"},
    ]

    body = client.get(f"/api/orders/{order.id}").json()
    assert body["status"] == "SHIPPED"  # partly refunded
    counts = {i["sku"]: (i["quantity"], i["returned"], i["refunded"]) for i in body["items"]}
    assert counts == {"A": (3, 2, 2), "B": (1, 1, 1)}
    assert [(r["amount"], r["reason"], r["status"]) for r in body["refunds"]] == [(2533, "return", "REQUESTED")]

    last = ask(client, order, [{"sku": "A", "quantity": 1}]).json()["id"]
    assert receive_return(return_id=last, conditions={"A": "restock"}).refund.amount == 966  # the line's rest
    payment = Payment.objects.get(order=order)
    assert payment.refunded_amount == payment.captured_amount == 3499  # every cent, not a cent more
    assert Order.objects.get(id=order.id).status == OrderStatus.REFUNDED


def test_staff_decide_once_and_a_rejection_frees_the_units(shipped):
    client, order = shipped
    asked = ask(client, order, [{"sku": "A", "quantity": 3}]).json()["id"]
    reject_return(return_id=asked)
    assert OrderItem.objects.get(order=order, product_id="A").in_returns == 0
    with pytest.raises(ReturnNotDecidable):
        approve_return(return_id=asked)
    with pytest.raises(ReturnNotReceivable):
        receive_return(return_id=asked, conditions={"A": "restock"})
    assert set(OutboxEvent.objects.filter(event_type__startswith="Return").values_list("event_type", flat=True)) == {
        "ReturnRequested",
        "ReturnRejected",
    }

    second = ask(client, order, [{"sku": "A", "quantity": 3}]).json()["id"]  # the units are returnable again
    receive_return(return_id=second, conditions={"A": "damaged"})  # received before any decision: approved by it
    with pytest.raises(ReturnNotReceivable):
        receive_return(return_id=second, conditions={"A": "damaged"})
    with pytest.raises(ValueError):
        receive_return(return_id=ask(client, order, [{"sku": "B", "quantity": 1}]).json()["id"], conditions={})


def test_a_line_can_never_be_returned_past_what_shipped_nor_refunded_past_it(shipped):
    _, order = shipped
    item = OrderItem.objects.get(order=order, product_id="A")
    for fields in ({"in_returns": 4}, {"returned": 1}, {"refunded": 4}, {"cancelled": 1, "in_returns": 3}):
        with pytest.raises(IntegrityError), transaction.atomic():
            OrderItem.objects.filter(id=item.id).update(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Payment.objects.filter(order=order).update(refunded_amount=3500)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_returns_of_one_line_racing_never_claim_more_than_shipped(redis, provider):
    product_with_stock(sku="A", price=1000, available=40)
    for round_ in range(3):
        client = shopper_client()
        order = place_pending_order(redis, client.user, {"A": 3})
        ship(order, payment_id=f"pay_race_{round_}")
        asks = [
            lambda c=client, o=order: ask(shopper_client(c.user), o, [{"sku": "A", "quantity": 2}]) for _ in range(6)
        ]
        answers = sorted(response.status_code for response in run_in_threads(asks))
        assert answers == [201, 422, 422, 422, 422, 422], answers
        assert OrderItem.objects.get(order=order).in_returns == 2


def test_return_order_command_requests_approves_and_receives(shipped, capsys):
    _, order = shipped
    call_command("return_order", "request", str(order.id), "A:1", "B:1", "--reason", "by phone")
    returned = Return.objects.get()
    call_command("return_order", "list")
    call_command("return_order", "approve", str(returned.id))
    call_command("return_order", "receive", str(returned.id), "--damaged", "B")
    out = capsys.readouterr().out
    assert f"return {returned.id} of order {order.id}: REQUESTED, 1 x A, 1 x B (by phone)" in out
    assert f"return {returned.id}: RECEIVED, €15.66 refunded" in out  # 967 + 599
    assert dict(returned.lines.values_list("item__product_id", "condition")) == {"A": "restock", "B": "damaged"}
    with pytest.raises(CommandError, match="Only a requested return"):
        call_command("return_order", "reject", str(returned.id))
    with pytest.raises(CommandError, match="More units than can still be returned"):
        call_command("return_order", "request", str(order.id), "A:1", "B:1")
