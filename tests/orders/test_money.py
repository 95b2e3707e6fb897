"""One owner for an order's money (orders/money.py): the bugs it was built to
end, each told as a shopper or an operator would meet it."""

from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from orders import money
from orders.handlers import send_refund_completed, send_refund_notice
from orders.models import Order, OrderStatus, Payment, Refund
from orders.services import mark_order_shipped, refund_goodwill, remove_order_lines
from orders.services.refunds import submit_refund
from outbox.models import OutboxEvent
from tests.factories import UserFactory, product_with_stock
from tests.helpers import checkout, consumer_event, fill_cart, place_pending_order, post_webhook, shopper_client
from tests.orders.test_returns import ship

pytestmark = pytest.mark.django_db


def events(event_type: str) -> list[dict]:
    return [event.payload for event in OutboxEvent.objects.filter(event_type=event_type).order_by("id")]


def told(event_type: str, handler) -> None:
    """The e-mail consumer's `handler` given every `event_type` event in the outbox."""
    for payload in events(event_type):
        handler(consumer_event(event_type, **payload))


def test_a_duplicate_payment_after_shipping_is_refunded_and_the_order_stays_shipped(redis, provider):
    product_with_stock(sku="A", price=1250, available=10)
    client = shopper_client()
    order = place_pending_order(redis, client.user, {"A": 2})
    first = ship(order, payment_id="pay_first")

    response = post_webhook(Client(), payment_id="pay_second", order_id=order.id, amount=2500, status="captured")
    assert response.status_code == 200, response.content

    order.refresh_from_db()
    assert order.status == OrderStatus.SHIPPED
    [refund] = Refund.objects.all()
    assert (refund.payment.provider_payment_id, refund.amount, refund.reason) == (
        "pay_second",
        2500,
        "order_not_pending",
    )
    first.refresh_from_db()
    assert (first.captured_amount, first.refunded_amount) == (2500, 0)
    assert money.applied_payment(order_id=order.id).id == first.id
    body = client.get(f"/api/orders/{order.id}").json()
    assert body["status"] == "SHIPPED" and [r["amount"] for r in body["refunds"]] == [2500]

    mail.outbox.clear()
    told("RefundRequested", send_refund_notice)
    [notice] = mail.outbox
    assert "Refund for order" not in notice.subject and "pay_second" in notice.subject
    [requested] = events("RefundRequested")
    send_refund_completed(consumer_event("RefundCompleted", **requested, payment_refunded=True))
    assert [m.subject for m in mail.outbox[1:]] == ["Your payment pay_second is refunded"]


def test_a_refund_of_the_payment_that_paid_a_shipped_order_in_full_makes_it_refunded(redis, provider):
    product_with_stock(sku="A", price=1250, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    ship(order)
    refund_goodwill(order_id=order.id, amount=2500, note="lost in the post")
    assert Order.objects.get(id=order.id).status == OrderStatus.REFUNDED


def test_a_new_account_never_gets_longer_to_pay_than_the_shop_gives_everyone(redis, settings):
    settings.ORDER_PAYMENT_TIMEOUT_SECONDS = 5
    settings.NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS = 300
    product_with_stock(sku="A", price=1250, available=10)
    client = shopper_client(UserFactory(date_joined=timezone.now()))

    def window(key: str) -> timedelta:
        fill_cart(redis, client.user.id, {"A": 1})
        response = checkout(client, key)
        assert response.status_code == 201, response.content
        order = Order.objects.get(id=response.json()["id"])
        return order.expires_at - order.created_at

    assert window("k-1") <= timedelta(seconds=5)
    settings.ORDER_PAYMENT_TIMEOUT_SECONDS = 900  # the shop's window longer: the new account's shorter one
    assert timedelta(seconds=299) <= window("k-2") <= timedelta(seconds=300)


def test_a_providers_capture_of_the_whole_authorization_after_lines_were_removed_gives_the_rest_back(redis, provider):
    product_with_stock(sku="A", price=3999, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 3})
    post_webhook(Client(), payment_id="pay_auto", order_id=order.id, amount=11997, status="authorized")
    remove_order_lines(order_id=order.id, lines={"A": 1})
    assert Order.objects.get(id=order.id).total_amount == 7998

    # The provider captures on its own what it authorized (an automatic capture).
    post_webhook(Client(), payment_id="pay_auto", order_id=order.id, amount=11997, status="captured")

    payment = Payment.objects.get(provider_payment_id="pay_auto")
    assert (payment.status, payment.captured_amount) == (Payment.Status.CAPTURED, 11997)
    [refund] = Refund.objects.all()
    assert (refund.amount, refund.reason, refund.payment_id) == (3999, "excess_capture", payment.id)
    assert payment.captured_amount - payment.refunded_amount == 7998  # what the order costs, kept
    assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    assert submit_refund(refund_id=refund.id).status == Refund.Status.SUBMITTED
    assert provider.called("refunds")[-1][1]["amount"] == 3999


def test_the_shop_captures_what_the_order_costs_after_lines_were_removed(redis, provider):
    product_with_stock(sku="A", price=3999, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 3})
    post_webhook(Client(), payment_id="pay_m", order_id=order.id, amount=11997, status="authorized")
    remove_order_lines(order_id=order.id, lines={"A": 1})
    payment = Payment.objects.get(provider_payment_id="pay_m")
    assert (money.amount_to_capture(payment), money.excess_captured(payment)) == (7998, 0)
    mark_order_shipped(order_id=order.id)  # captured first, for what the order costs now
    payment.refresh_from_db()
    assert (payment.status, payment.captured_amount) == (Payment.Status.CAPTURED, 7998)
    assert provider.called("captures")[-1][1]["amount"] == 7998


def test_at_most_one_payment_pays_an_order(redis, provider):
    from django.db import IntegrityError, transaction

    product_with_stock(sku="A", price=1250, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 2})
    post_webhook(Client(), payment_id="pay_a", order_id=order.id, amount=2500, status="authorized")
    post_webhook(Client(), payment_id="pay_b", order_id=order.id, amount=2500, status="authorized")
    with pytest.raises(IntegrityError), transaction.atomic():
        Payment.objects.filter(provider_payment_id="pay_b").update(outcome=Payment.Outcome.APPLIED)


def test_the_providers_word_on_the_shops_own_capture_records_what_it_took(redis, provider):
    """The provider's `captured` webhook arrives while the shop's capture of the
    new total is in flight (CAPTURING): what it took is the new total, not the
    authorization, and nothing is given back."""
    product_with_stock(sku="A", price=3999, available=10)
    order = place_pending_order(redis, UserFactory(), {"A": 3})
    post_webhook(Client(), payment_id="pay_c", order_id=order.id, amount=11997, status="authorized")
    remove_order_lines(order_id=order.id, lines={"A": 1})
    Payment.objects.filter(provider_payment_id="pay_c").update(status=Payment.Status.CAPTURING)  # the claim made

    post_webhook(Client(), payment_id="pay_c", order_id=order.id, amount=7998, status="captured")

    payment = Payment.objects.get(provider_payment_id="pay_c")
    assert (payment.status, payment.captured_amount, payment.refunded_amount) == (Payment.Status.CAPTURED, 7998, 0)
    assert not Refund.objects.exists()


def test_a_payment_that_failed_then_succeeded_under_its_id_for_another_order_pays_that_order(redis, provider):
    product_with_stock(sku="A", price=1250, available=10)
    first = place_pending_order(redis, UserFactory(), {"A": 2})
    second = place_pending_order(redis, UserFactory(), {"A": 2})
    post_webhook(Client(), payment_id="pay_f", order_id=first.id, amount=2500, status="failed")
    response = post_webhook(Client(), payment_id="pay_f", order_id=second.id, amount=2500, status="authorized")
    assert response.status_code == 200, response.content
    assert money.applied_payment(order_id=second.id).provider_payment_id == "pay_f"
    assert money.applied_payment(order_id=first.id) is None
    assert Order.objects.get(id=second.id).status == OrderStatus.PAID


@pytest.mark.django_db(transaction=True)
def test_three_payments_for_one_order_at_once_pay_it_once(redis, provider):
    from django.db import connection

    from tests.helpers import post_signed, run_in_threads

    product_with_stock(sku="A", price=1250, available=50)
    for round_ in range(3):
        order = place_pending_order(redis, UserFactory(), {"A": 2}, key=f"three-{round_}")
        bodies = [
            {
                "payment_id": f"pay_{round_}_{n}",
                "order_id": order.id,
                "amount": 2500,
                "currency": "EUR",
                "status": "captured",
            }
            for n in range(3)
        ]
        answers = run_in_threads([lambda body=body: post_signed(Client(), body).json()["outcome"] for body in bodies])
        assert sorted(answers) == ["applied", "refunded", "refunded"]
        assert Payment.objects.filter(order=order, outcome=Payment.Outcome.APPLIED).count() == 1
        assert Refund.objects.filter(order=order, reason="order_not_pending").count() == 2
        assert Order.objects.get(id=order.id).status == OrderStatus.PAID
    connection.close()


def test_an_excess_capture_refund_takes_back_points_only_when_it_is_the_last_of_the_money():
    from shop.handlers import take_back_refunded_points
    from shop.models import LoyaltyEntry

    customer = UserFactory()
    LoyaltyEntry.objects.create(order_id=7, customer=customer, reason=LoyaltyEntry.Reason.ORDER_PAID, points=79)
    done = {
        "order_id": 7,
        "customer_id": customer.id,
        "payment_id": "p",
        "amount": 3999,
        "currency": "EUR",
        "reason": "excess_capture",
        "lines": [],
    }
    take_back_refunded_points(consumer_event("RefundCompleted", refund_id=1, payment_refunded=False, **done))
    assert LoyaltyEntry.objects.filter(order_id=7).count() == 1  # its points went with the removed lines
    take_back_refunded_points(consumer_event("RefundCompleted", refund_id=2, payment_refunded=True, **done))
    assert sum(LoyaltyEntry.objects.filter(order_id=7).values_list("points", flat=True)) == 0
