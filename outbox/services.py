import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Count, Min
from django.utils import timezone

from core.db import execute_kept
from core.requestid import current_request_id
from outbox.models import OutboxEvent, UnpublishedEvent


@dataclass(frozen=True)
class NewEvent:
    aggregate_type: str
    aggregate_id: str | int
    event_type: str
    data: dict


_INSERT = (
    f"INSERT INTO {OutboxEvent._meta.db_table} "
    "(event_id, aggregate_type, aggregate_id, event_type, payload, created_at, attempts, last_error, request_id) "
)
_INSERT_ONE = _INSERT + "VALUES (%s, %s, %s, %s, %s::jsonb, %s, 0, '', %s) RETURNING id"
_INSERT_MANY = (
    _INSERT + "SELECT (e->>'id')::uuid, e->>'type', e->>'aggregate', e->>'event', e->'payload', %s, 0, '', %s "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY t.n RETURNING id"
)


_ENCODE = DjangoJSONEncoder().encode  # json.dumps(data, cls=DjangoJSONEncoder), without a new encoder per call


def record_events(events: Sequence[NewEvent]) -> list[int]:
    """Write events to the outbox, only inside the transaction of the change
    they announce (both commit together or neither does); returns their ids in
    order. The one writer of outbox rows: a single INSERT, whatever the number
    of events, and no model instances (it runs on every checkout, and once per
    expiry batch for hundreds of orders)."""
    if not connection.in_atomic_block:
        raise RuntimeError("events must be written inside the transaction of the change they announce")
    if not events:
        return []
    if len(events) == 1:
        [event] = events
        payload = _ENCODE(event.data)
        row = [uuid.uuid4(), event.aggregate_type, str(event.aggregate_id), event.event_type, payload]
        cursor = execute_kept(_INSERT_ONE, [*row, timezone.now(), current_request_id()])
    else:
        # The rows as one JSON document, which PostgreSQL takes apart: binding
        # 7 scalars per row took 21 ms of a 58 ms expiry batch of 500 orders,
        # an array per column 12 ms, most of it escaping each payload's
        # quotes into the array literal on the client (30% of the queue
        # writer's profile); one document is one string to quote.
        rows = [
            {
                "id": str(uuid.uuid4()),
                "type": event.aggregate_type,
                "aggregate": str(event.aggregate_id),
                "event": event.event_type,
                "payload": event.data,
            }
            for event in events
        ]
        document = json.dumps(rows, cls=DjangoJSONEncoder)
        cursor = execute_kept(_INSERT_MANY, [timezone.now(), current_request_id(), document])
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


@dataclass(frozen=True)
class Backlog:
    waiting: int  # events not yet acknowledged by Kafka
    oldest_age_seconds: float | None  # how long the oldest has waited; None when none waits


def backlog(*, now: datetime | None = None) -> Backlog:
    """The outbox's backlog, as every screen and the metrics show it: one query."""
    found = UnpublishedEvent.objects.aggregate(count=Count("pk"), oldest=Min("event__created_at"))
    oldest = found["oldest"]
    age = ((now or timezone.now()) - oldest).total_seconds() if oldest is not None else None
    return Backlog(found["count"], age)


def rewrite_payloads(*, aggregate_type: str, aggregate_ids: list, rewrite: Callable[[str, dict], dict]) -> int:
    """Each stored event of those aggregates, published or not, given the payload
    `rewrite(event_type, payload)` returns when it differs (a shopper's erasure:
    the relay then publishes an unpublished one rewritten); how many changed."""
    events = OutboxEvent.objects.filter(aggregate_type=aggregate_type, aggregate_id__in=[str(i) for i in aggregate_ids])
    changed = []
    for event in events.only("id", "event_type", "payload").order_by("id"):
        payload = rewrite(event.event_type, dict(event.payload))
        if payload != event.payload:
            event.payload = payload
            changed.append(event)
    OutboxEvent.objects.bulk_update(changed, ["payload"], batch_size=500)
    return len(changed)
