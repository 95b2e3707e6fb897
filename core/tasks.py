from celery import shared_task

from core.hotcache import sync_generations


@shared_task
def sync_generations_task() -> int:
    return sync_generations()
