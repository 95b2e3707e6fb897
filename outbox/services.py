import json
import uuid
from contextlib import nullcontext
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Count, Min
from django.utils import timezone

from core.requestid import current_request_id
from outbox.models import OutboxEvent, UnpublishedEvent

_INSERT_EVENT = (
    f"INSERT INTO {OutboxEvent._meta.db_table} (event_id, aggregate_type, aggregate_id, event_type, "
    "payload, created_at, attempts, last_error, request_id) "
    "VALUES (%s, %s, %s, %s, %s::jsonb, %s, 0, '', %s) RETURNING id"
)


def record_event(
    *, aggregate_type: str, aggregate_id: str | int, event_type: str, data: dict, cursor: CursorWrapper | None = None
) -> int:
    """Write an event to the outbox, only inside the transaction of the change
    it announces (both commit together or neither does); returns its id. One
    raw INSERT and no model instance: it runs on every checkout (which passes
    its cursor)."""
    if not connection.in_atomic_block:
        raise RuntimeError("events must be written inside the transaction of the change they announce")
    with nullcontext(cursor) if cursor else connection.cursor() as cursor:
        cursor.execute(
            _INSERT_EVENT,
            [
                uuid.uuid4(),
                aggregate_type,
                str(aggregate_id),
                event_type,
                json.dumps(data, cls=DjangoJSONEncoder),
                timezone.now(),
                current_request_id(),
            ],
        )
        return cursor.fetchone()[0]


def purge_published_events(*, older_than_days: int | None = None, batch_size: int = 10_000) -> int:
    """Delete published events past the retention period, in bounded batches."""
    days = settings.OUTBOX_RETENTION_DAYS if older_than_days is None else older_than_days
    cutoff = timezone.now() - timedelta(days=days)
    total = 0
    while True:
        ids = list(
            OutboxEvent.objects.filter(published_at__lt=cutoff).order_by("id").values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return total
        total += OutboxEvent.objects.filter(id__in=ids).delete()[1].get(OutboxEvent._meta.label, 0)


def backlog() -> tuple[int, datetime | None]:
    """How many events wait for Kafka, and when the oldest was written."""
    waiting = UnpublishedEvent.objects.aggregate(count=Count("pk"), oldest=Min("event__created_at"))
    return waiting["count"], waiting["oldest"]
