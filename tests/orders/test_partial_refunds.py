"""Several refunds per payment (orders/services/refunds.py): goodwill refunds,
two members of staff refunding at once, a failed refund's claim given back;
lines removed before shipping (orders/services/amendments.py); a return's
refund paid out through the development provider, its points taken back once."""

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import include, path

from config.urls import urlpatterns as shop_urls
from inventory.models import Shipment, Stock
from orders import provider as provider_module
from orders.exceptions import LinesNotRemovable, PaymentNotCaptured, RefundExceedsCaptured, SkuNotOnOrder
from orders.handlers import submit_requested_refund
from orders.models import Order, OrderItem, OrderStatus, Payment, Refund
from orders.services import mark_order_shipped, receive_return, refund_goodwill, remove_order_lines
from orders.services.refunds import retry_refund, submit_refund
from outbox.consumers import apply_event
from outbox.models import OutboxEvent
from shop.models import LoyaltyEntry
from tests.factories import UserFactory, product_with_stock
from tests.helpers import (
    consumer_event,
    place_pending_order,
    post_signed,
    post_webhook,
    run_in_threads,
    shopper_client,
    wait_until,
)
from tests.orders.test_returns import ask, ship

pytestmark = pytest.mark.django_db


@pytest.fixture
def captured(redis, provider):
    """A shipped order whose 2 x "A" at 1250 (2500) were captured."""
    product_with_stock(sku="A", price=1250, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    ship(order)
    return order


def events(event_type: str) -> list[dict]:
    return [event.payload for event in OutboxEvent.objects.filter(event_type=event_type)]


def test_goodwill_refunds_add_up_to_what_was_captured_and_never_past_it(captured):
    first = refund_goodwill(order_id=captured.id, amount=1000, note="late delivery")
    assert (first.amount, first.reason, first.note, first.lines) == (1000, "goodwill", "late delivery", [])
    with pytest.raises(RefundExceedsCaptured) as refused:
        refund_goodwill(order_id=captured.id, amount=1501, note="too much")
    assert refused.value.details == {"amount": 1501, "refundable": 1500}
    refund_goodwill(order_id=captured.id, amount=1500, note="the rest")
    assert Payment.objects.get(order=captured).refunded_amount == 2500
    assert Order.objects.get(id=captured.id).status == OrderStatus.REFUNDED  # all given back
    assert [e["amount"] for e in events("RefundRequested")] == [1000, 1500]


def test_only_captured_money_is_refunded(redis, provider):
    product_with_stock(sku="A", price=1250, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    post_webhook(Client(), payment_id="pay_held", order_id=order.id, amount=2500, status="authorized")
    with pytest.raises(PaymentNotCaptured):
        refund_goodwill(order_id=order.id, amount=100, note="held only")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_two_staff_refunding_one_order_at_once_never_pass_the_capture(redis, provider):
    product_with_stock(sku="A", price=1250, available=50)
    for round_ in range(6):
        order = place_pending_order(redis, UserFactory(), {"A": 2})
        ship(order, payment_id=f"pay_both_{round_}")

        def refund(note, order_id=order.id):
            try:
                return refund_goodwill(order_id=order_id, amount=1500, note=note).amount
            except RefundExceedsCaptured as refused:
                return refused.details["refundable"]

        assert sorted(run_in_threads([lambda: refund("one"), lambda: refund("two")])) == [1000, 1500]
        assert Payment.objects.get(order=order).refunded_amount == 1500
        assert Refund.objects.filter(order=order).count() == 1


def test_a_failed_refund_gives_its_claim_back_and_its_retry_claims_again(captured):
    refund = refund_goodwill(order_id=captured.id, amount=2000, note="broken on arrival")
    body = {
        "type": "refund",
        "refund_id": refund.id,
        "payment_id": "pay_r",
        "amount": 2000,
        "currency": "EUR",
        "status": "failed",
    }
    assert post_signed(Client(), body).json()["outcome"] == "failed"
    assert Payment.objects.get(order=captured).refunded_amount == 0
    other = refund_goodwill(order_id=captured.id, amount=1000, note="meanwhile")
    assert not retry_refund(refund_id=refund.id)  # 2000 no longer fits: 1500 left
    refund.refresh_from_db()
    assert refund.status == Refund.Status.FAILED
    body.update(refund_id=other.id, amount=1000, status="failed")
    post_signed(Client(), body)
    assert retry_refund(refund_id=refund.id)
    assert Payment.objects.get(order=captured).refunded_amount == 2000


# --- lines removed before shipping ----------------------------------------------------------------


@pytest.fixture
def paid(redis, provider):
    """A paid, unshipped order of 2 x "A" at 1250 and 1 x "B" at 500, its payment authorized."""
    product_with_stock(sku="A", price=1250, available=10)
    product_with_stock(sku="B", price=500, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 2, "B": 1})
    post_webhook(Client(), payment_id="pay_lines", order_id=order.id, amount=3000, status="authorized")
    apply_event(consumer="warehouse", event=consumer_event("OrderPaid", **events("OrderPaid")[0]))
    return order


def test_removed_lines_go_back_on_sale_and_the_capture_takes_the_new_total(paid, provider):
    remove_order_lines(order_id=paid.id, lines={"A": 1})
    order = Order.objects.get(id=paid.id)
    assert (order.status, order.total_amount) == (OrderStatus.PAID, 1750)
    assert Stock.objects.filter(product_id="A").values_list("available", "reserved").get() == (9, 1)
    assert OrderItem.objects.get(order=order, product_id="A").cancelled == 1
    [removed] = events("OrderLinesCancelled")
    assert removed["lines"] == [{"sku": "A", "quantity": 1, "amount": 1250, "tax": 0}] and removed["refund_id"] is None
    assert removed["items"] == [{"sku": "A", "quantity": 1}, {"sku": "B", "quantity": 1}]
    apply_event(consumer="warehouse", event=consumer_event("OrderLinesCancelled", **removed))
    assert Shipment.objects.get(order_id=order.id).items == removed["items"]

    mark_order_shipped(order_id=order.id)  # captures first
    assert events("OrderShipped")[0]["items"] == removed["items"]
    assert Stock.objects.filter(product_id="A").values_list("available", "reserved", "shipped").get() == (9, 0, 1)
    payment = Payment.objects.get(order=order)
    assert provider.called("captures")[-1][1]["amount"] == 1750  # the rest of the hold released
    payment.refresh_from_db()
    assert (payment.captured_amount, payment.amount) == (1750, 3000)
    assert not Refund.objects.exists()


def test_the_shipment_leaves_without_removed_lines_when_the_warehouse_has_not_heard_of_the_removal(paid):
    assert [line["sku"] for line in Shipment.objects.get(order_id=paid.id).items] == ["A", "B"]
    remove_order_lines(order_id=paid.id, lines={"B": 1})  # OrderLinesCancelled not consumed yet
    mark_order_shipped(order_id=paid.id)
    assert Shipment.objects.get(order_id=paid.id).items == [{"sku": "A", "quantity": 2}]


def test_removing_lines_of_a_captured_payment_refunds_them(paid):
    Payment.objects.filter(order=paid).update(status="captured", captured_at=paid.created_at, captured_amount=3000)
    remove_order_lines(order_id=paid.id, lines={"B": 1})
    [refund] = Refund.objects.all()
    assert (refund.amount, refund.reason, refund.lines) == (
        500,
        "lines_cancelled",
        [{"sku": "B", "quantity": 1, "amount": 500, "tax": 0}],
    )
    assert events("OrderLinesCancelled")[0]["refund_id"] == refund.id


def test_what_cannot_be_removed_is_refused_and_nothing_changes(paid):
    with pytest.raises(LinesNotRemovable):
        remove_order_lines(order_id=paid.id, lines={"A": 2, "B": 1})  # every unit: cancel the order instead
    with pytest.raises(LinesNotRemovable):
        remove_order_lines(order_id=paid.id, lines={"A": 3})
    with pytest.raises(SkuNotOnOrder):
        remove_order_lines(order_id=paid.id, lines={"Z": 1})
    Payment.objects.filter(order=paid).update(status="capturing")
    with pytest.raises(PaymentNotCaptured):
        remove_order_lines(order_id=paid.id, lines={"A": 1})
    Payment.objects.filter(order=paid).update(status="authorized")
    mark_order_shipped(order_id=paid.id)
    with pytest.raises(LinesNotRemovable):
        remove_order_lines(order_id=paid.id, lines={"A": 1})  # shipped
    assert Order.objects.get(id=paid.id).total_amount == 3000 and not OrderItem.objects.filter(cancelled__gt=0)


def test_refund_order_command_gives_back_an_amount_with_a_reason(captured, capsys):
    call_command("refund_order", str(captured.id), "--amount", "250", "--reason", "scratched box")
    assert "€2.50 requested" in capsys.readouterr().out
    assert Refund.objects.get().note == "scratched box"
    with pytest.raises(CommandError, match="would exceed"):
        call_command("refund_order", str(captured.id), "--amount", "2251", "--reason", "too much")


# --- a return's refund through the development provider -----------------------------------------

urlpatterns = [path("dev/payment-provider/", include("config.dev_provider_urls")), *shop_urls]


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_received_return_is_refunded_through_the_simulator_and_its_points_taken_back_once(
    live_server, settings, redis, provider, monkeypatch
):
    product_with_stock(sku="A", price=1250, available=10)
    shopper = UserFactory()
    order = place_pending_order(redis, shopper, {"A": 2})
    ship(order)
    apply_event(consumer="loyalty", event=consumer_event("OrderPaid", **events("OrderPaid")[0]))
    returned = ask(shopper_client(shopper), order, [{"sku": "A", "quantity": 1}]).json()["id"]
    refund = receive_return(return_id=returned, conditions={"A": "restock"}).refund

    settings.PAYMENT_PROVIDER_URL = f"{live_server.url}/dev/payment-provider"
    settings.DEV_PROVIDER_WEBHOOK_URL = f"{live_server.url}/api/payments/webhook"
    submit_requested_refund(consumer_event("RefundRequested", **events("RefundRequested")[0]))
    assert wait_until(lambda: Refund.objects.get(id=refund.id).status == Refund.Status.COMPLETED, 10)
    calls = []
    monkeypatch.setattr(provider_module, "refund", lambda **call: calls.append(call))
    assert submit_refund(refund_id=refund.id).status == Refund.Status.COMPLETED  # redelivered:
    assert calls == []  # no second call

    [completed] = events("RefundCompleted")
    assert (completed["amount"], completed["lines"], completed["payment_refunded"]) == (
        1250,
        [{"sku": "A", "quantity": 1, "amount": 1250, "tax": 0}],
        False,
    )
    as_consumed = consumer_event("RefundCompleted", **completed)
    for _ in range(2):
        apply_event(consumer="loyalty", event=as_consumed)
    assert sorted(LoyaltyEntry.objects.filter(order_id=order.id).values_list("points", flat=True)) == [-12, 25]
    assert Payment.objects.get(order=order).status == Payment.Status.CAPTURED  # half of it still taken


def test_a_shipped_order_is_not_refunded_as_an_unshipped_one(captured):
    from orders.exceptions import OrderNotRefundable
    from orders.services import refund_paid_order

    with pytest.raises(OrderNotRefundable):
        refund_paid_order(order_id=captured.id)  # its units left: returns, or an amount
    assert Order.objects.get(id=captured.id).status == OrderStatus.SHIPPED and not Refund.objects.exists()


def test_removed_lines_after_a_goodwill_refund_refund_only_what_is_left(paid):
    Payment.objects.filter(order=paid).update(status="captured", captured_at=paid.created_at, captured_amount=3000)
    refund_goodwill(order_id=paid.id, amount=2800, note="nearly all")
    before = OutboxEvent.objects.latest("id").id
    remove_order_lines(order_id=paid.id, lines={"B": 1})
    assert list(Refund.objects.order_by("id").values_list("amount", "reason")) == [
        (2800, "goodwill"),
        (200, "lines_cancelled"),
    ]
    assert Payment.objects.get(order=paid).refunded_amount == 3000

    mail.outbox.clear()  # the shopper hears of the removal once, with what really goes back (not the lines' 5.00)
    removal = OutboxEvent.objects.filter(id__gt=before).order_by("id")
    assert [event.event_type for event in removal] == ["RefundRequested", "OrderLinesCancelled"]
    for event in removal:
        apply_event(consumer="email", event=consumer_event(event.event_type, **event.payload))
    [told] = mail.outbox
    assert "€2.00 is refunded to you" in told.body and "1 x B (€5.00)" in told.body


def test_removed_lines_when_earlier_refunds_took_the_whole_capture_say_nothing_more_is_refunded(paid):
    Payment.objects.filter(order=paid).update(status="captured", captured_at=paid.created_at, captured_amount=3000)
    refund_goodwill(order_id=paid.id, amount=3000, note="all of it")
    remove_order_lines(order_id=paid.id, lines={"B": 1})
    assert list(Refund.objects.values_list("reason", flat=True)) == ["goodwill"]
    [removed] = events("OrderLinesCancelled")
    assert (removed["refund_id"], removed["refund_amount"], removed["captured"]) == (None, 0, True)
    apply_event(consumer="email", event=consumer_event("OrderLinesCancelled", **removed))
    assert "nothing more is refunded" in mail.outbox[-1].body and "will not be charged" not in mail.outbox[-1].body
