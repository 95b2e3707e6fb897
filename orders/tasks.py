from celery import shared_task

from orders.services import expire_unpaid_orders


@shared_task
def expire_unpaid_orders_task() -> int:
    return expire_unpaid_orders()
