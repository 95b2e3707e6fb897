"""Every node may run Celery beat (scripts/cluster.sh runs one per node): each
scheduled job is safe to run twice at once, shown here with real threads on
their own connections. The relay's own proof is in tests/outbox/test_relay.py
(two relays publish each event once: the leader lock)."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from inventory.models import Stock
from orders.models import Order, OrderStatus
from orders.services import expire_unpaid_orders
from outbox.models import OutboxEvent
from outbox.services import purge_published_events, record_event
from tests.factories import UserFactory, product_with_stock
from tests.helpers import expire_now, place_pending_order, post_webhook, run_in_threads, wall_clock_ahead
from tests.orders.conftest import queue_topic  # noqa: F401 - a checkout topic of the test's own

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_schedule_holds_only_jobs_shown_safe_twice():
    # A new job joins this list with a test below (or a lock) showing two beats cannot double its effect.
    # With REDIS_CLUSTER_NODES, core.tasks.sync_generations_task joins too: tests/core/test_sharding.py
    # runs two at once.
    assert {job["task"] for job in settings.CELERY_BEAT_SCHEDULE.values()} == {
        "orders.tasks.expire_unpaid_orders_task",  # below
        "orders.tasks.capture_ending_authorizations_task",  # below
        "outbox.tasks.publish_outbox_task",  # the relay's leader lock
        "outbox.tasks.purge_published_events_task",  # below
        "orders.tasks.resend_stale_queued_task",  # below
    }


def test_two_expiry_runs_at_once_cancel_each_order_once(redis):
    product_with_stock(sku="A", price=100, available=500)
    orders = [place_pending_order(redis, user, {"A": 2}) for user in UserFactory.create_batch(120)]
    expire_now(*orders)
    counts = run_in_threads([lambda: expire_unpaid_orders(batch_size=10)] * 2)
    assert sum(counts) == 120  # none twice (SKIP LOCKED, then the conditional move)
    assert Order.objects.filter(status=OrderStatus.CANCELLED).count() == 120
    assert OutboxEvent.objects.filter(event_type="OrderCancelled").count() == 120
    assert Stock.objects.filter(product_id="A").values_list("available", "reserved").get() == (500, 0)


def test_two_purges_at_once_delete_each_event_once():
    from django.db import transaction

    with transaction.atomic():
        for n in range(300):
            record_event(aggregate_type="order", aggregate_id=n, event_type="Test", data={})
    OutboxEvent.objects.update(published_at=timezone.now() - timedelta(days=30))
    counts = run_in_threads([lambda: purge_published_events(batch_size=25)] * 2)
    assert sum(counts) == 300 and not OutboxEvent.objects.exists()


def test_two_authorization_runs_at_once_capture_each_payment_once_and_tell_of_it_once(redis, settings):
    from django.core import mail
    from django.test import Client

    from orders.models import Payment
    from orders.services.authorizations import capture_ending_authorizations
    from tests.orders.conftest import PaymentProvider

    provider = PaymentProvider()
    settings.PAYMENT_PROVIDER_URL = provider.url
    try:
        UserFactory(is_staff=True, is_superuser=True)  # someone to tell (the staff groups are flushed here)
        product_with_stock(sku="A", price=100, available=100)
        orders = [place_pending_order(redis, user, {"A": 1}) for user in UserFactory.create_batch(20)]
        for order in orders:
            post_webhook(Client(), payment_id=f"pay_{order.id}", order_id=order.id, amount=100, status="authorized")
        ends = max(Payment.objects.values_list("authorization_ends_at", flat=True))
        runs = run_in_threads([lambda: capture_ending_authorizations(now=ends - timedelta(hours=1))] * 2)
    finally:
        provider.stop()
    ids = sorted(order.id for order in orders)
    assert sorted(set(runs[0].captured) | set(runs[1].captured)) == ids
    assert sorted(runs[0].warned + runs[1].warned) == ids  # each told of once, by one run or the other
    assert sum(len(message.body.splitlines()) - 2 for message in mail.outbox) == 20
    assert Payment.objects.filter(status=Payment.Status.CAPTURED).count() == 20
    assert OutboxEvent.objects.filter(event_type="PaymentCaptured").count() == 20
    keys = {key for key, _ in provider.called("captures")}
    assert keys == {f"capture-{payment_id}" for payment_id in Payment.objects.values_list("id", flat=True)}


@pytest.mark.kafka
def test_two_stale_queue_sweeps_at_once_send_each_request_once(redis, queue_topic, settings, monkeypatch):  # noqa: F811
    from orders.services import queue_admission, queue_sweeper
    from tests.orders.conftest import SKU, checkout, drain, queue_sale, shopper_with_cart, stock

    queue_sale(20)
    settings.QUEUE_STALE_AFTER_SECONDS = 60
    ids = [checkout(shopper_with_cart(redis), f"stale-{n}").json()["id"] for n in range(10)]
    wall_clock_ahead(monkeypatch, 61, queue_admission, queue_sweeper)

    runs = run_in_threads([queue_sweeper.resend_stale_queued] * 2)

    assert sorted(runs[0].resent + runs[1].resent) == sorted(ids)  # each claimed by one sweep (SET NX)
    assert drain(10).written == 10 and stock() == (10, 10)
    assert Order.objects.count() == 10 and queue_admission.queue_depths() == {SKU: 0}
