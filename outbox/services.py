import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Count, Min
from django.utils import timezone

from core.requestid import current_request_id
from outbox.models import OutboxEvent, UnpublishedEvent


@dataclass(frozen=True)
class NewEvent:
    aggregate_type: str
    aggregate_id: str | int
    event_type: str
    data: dict


_COLUMNS = "event_id, aggregate_type, aggregate_id, event_type, payload, created_at, attempts, last_error, request_id"
_ROW = "(%s, %s, %s, %s, %s::jsonb, %s, 0, '', %s)"


def record_events(events: Sequence[NewEvent]) -> list[int]:
    """Write events to the outbox, only inside the transaction of the change
    they announce (both commit together or neither does); returns their ids in
    order. The one writer of outbox rows: a single INSERT, whatever the number
    of events, and no model instances (it runs on every checkout, and once per
    expiry batch for a thousand orders)."""
    if not connection.in_atomic_block:
        raise RuntimeError("events must be written inside the transaction of the change they announce")
    if not events:
        return []
    now, request_id = timezone.now(), current_request_id()
    params: list = []
    for event in events:
        params += [
            uuid.uuid4(),
            event.aggregate_type,
            str(event.aggregate_id),
            event.event_type,
            json.dumps(event.data, cls=DjangoJSONEncoder),
            now,
            request_id,
        ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {OutboxEvent._meta.db_table} ({_COLUMNS}) VALUES {', '.join([_ROW] * len(events))} "
            "RETURNING id",
            params,
        )
        return [row[0] for row in cursor.fetchall()]


def record_event(*, aggregate_type: str, aggregate_id: str | int, event_type: str, data: dict) -> int:
    """One event: see record_events."""
    return record_events([NewEvent(aggregate_type, aggregate_id, event_type, data)])[0]


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
