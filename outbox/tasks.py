from celery import shared_task

from outbox.relay import publish_outbox
from outbox.services import purge_published_events


@shared_task
def publish_outbox_task() -> int:
    return publish_outbox()


@shared_task
def purge_published_events_task() -> int:
    return purge_published_events()
