from django.db import connection

from outbox.models import OutboxEvent


def record_event(*, aggregate_type: str, aggregate_id: str | int, event_type: str, data: dict) -> OutboxEvent:
    """Write an event to the outbox. Only inside the transaction of the change it
    announces: both commit together or neither does."""
    if not connection.in_atomic_block:
        raise RuntimeError("record_event must run inside the transaction of the change it announces")
    return OutboxEvent.objects.create(
        aggregate_type=aggregate_type, aggregate_id=str(aggregate_id), event_type=event_type, payload=data
    )
