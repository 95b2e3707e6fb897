from dataclasses import asdict

from celery import shared_task

from orders.services import expire_unpaid_orders
from orders.services.authorizations import capture_ending_authorizations
from orders.services.queue_sweeper import resend_stale_queued


@shared_task
def expire_unpaid_orders_task() -> int:
    return expire_unpaid_orders()


@shared_task
def capture_ending_authorizations_task() -> dict:
    return asdict(capture_ending_authorizations())


@shared_task
def resend_stale_queued_task() -> dict:
    return asdict(resend_stale_queued())
