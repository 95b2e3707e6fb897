"""The relay's SQL: the leader lock, the runs not finished, the read of
unpublished events, and the marks (published, or failed)."""

import logging
from datetime import datetime

import psycopg
from django.db import connection

from outbox.models import OutboxEvent, RelayRun, UnpublishedEvent

logger = logging.getLogger("outbox.relay")  # the one name of the relay's log lines

# Any constant shared by every relay; "outbox" in ASCII.
RELAY_LOCK_KEY = 0x6F7574626F78

# PostgreSQL hands over the envelope's parts as JSON text (strings escaped,
# the timestamp in ISO 8601, the payload as stored) and Python joins them:
# json_build_object() spent more time looking up the type of each argument
# than writing it, and re-encoding model instances in Python was half of the
# relay's time (bench/relay.py). The envelope is the contract in docs/events.md.
# The ids are taken first (LIMIT in the subquery), so that the planner joins
# n rows, never the whole queue: a backlog of 50,000 made a hash join of it.
# No `FOR UPDATE SKIP LOCKED`: under the leader lock nobody else reads these
# rows, and locking them would write to every one of them.
_READ_BATCH = f"""
    SELECT e.id, e.aggregate_id, e.event_id::text, e.event_type, e.request_id,
           to_json(e.event_type)::text, to_json(e.created_at)::text,
           to_json(e.aggregate_type)::text, to_json(e.aggregate_id)::text, e.payload::text
    FROM (
        SELECT id FROM {UnpublishedEvent._meta.db_table} WHERE id > %(after)s ORDER BY id LIMIT %(limit)s
    ) AS p
    JOIN {OutboxEvent._meta.db_table} AS e ON e.id = p.id
    WHERE e.published_at IS NULL
    ORDER BY e.id
"""

# (id, key, value, event_id, event_type, request_id)
PendingEvent = tuple[int, bytes, bytes, str, str, str]


def try_lock() -> bool:
    """The leader lock: whether this relay is the one that publishes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [RELAY_LOCK_KEY])
        return cursor.fetchone()[0]


def unlock() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [RELAY_LOCK_KEY])
    except Exception:  # a broken connection: closing it releases the lock
        logger.debug("relay: could not release the leader lock", exc_info=True)
        connection.close()


def repeatable_read() -> None:
    """The current transaction, not yet started, reads one snapshot."""
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def unfinished_runs() -> list[RelayRun]:
    return list(RelayRun.objects.all())


def start_run(topic: str, started_at: datetime) -> int | None:
    """The run's row, committed (autocommit) before it produces anything; None
    (and no row) when no event is waiting. One statement: the ORM's exists()
    then create() was a round trip more on every run with work."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {RelayRun._meta.db_table} (topic, started_at) "
            f"SELECT %s, %s WHERE EXISTS (SELECT FROM {UnpublishedEvent._meta.db_table}) RETURNING id",
            [topic, started_at],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def finish_run(run_id: int) -> None:
    """Deletes the run's row; in the run's own transaction, with its last marks
    (the ORM's delete() outside one was its own BEGIN, DELETE and COMMIT)."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {RelayRun._meta.db_table} WHERE id = %s", [run_id])


def waiting_ids(limit: int) -> list[int]:
    return list(UnpublishedEvent.objects.values_list("event_id", flat=True)[:limit])


def read_pending(limit: int, *, after: int = 0, raw: psycopg.Connection | None = None) -> list[PendingEvent]:
    """The next `limit` unpublished events after id `after`, as Kafka messages.
    `raw`: the psycopg connection (and its transaction) to read on, when it is
    not this thread's own; psycopg connections are thread-safe."""
    if raw is None:
        connection.ensure_connection()
        raw = connection.connection
    # The driver's own cursor, binary: text columns arrive as they are, with
    # no escaping either way (Django's cursors bind on the client, text only).
    with psycopg.Cursor(raw) as cursor:
        cursor.execute(_READ_BATCH, {"after": after, "limit": limit}, binary=True)
        return [
            (
                event_id,
                key.encode(),
                f'{{"event_id":"{uuid}","event_type":{type_json},"occurred_at":{occurred_at},'
                f'"aggregate_type":{aggregate_type},"aggregate_id":{aggregate_id},"data":{payload}}}'.encode(),
                uuid,
                event_type,
                request_id,
            )
            for (
                event_id,
                key,
                uuid,
                event_type,
                request_id,
                type_json,
                occurred_at,
                aggregate_type,
                aggregate_id,
                payload,
            ) in cursor.fetchall()
        ]


def mark_published(ids: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH done AS (DELETE FROM {UnpublishedEvent._meta.db_table} WHERE id = ANY(%s) RETURNING id)
            UPDATE {OutboxEvent._meta.db_table} AS e SET published_at = statement_timestamp()
            FROM done WHERE e.id = done.id
            """,
            [ids],
        )


def mark_published_by_event_id(event_ids: set[str]) -> int:
    """Marks those of these events (by `event_id`) still waiting; returns how many."""
    queued = UnpublishedEvent.objects.filter(event__event_id__any=sorted(event_ids))
    waiting = list(queued.values_list("event_id", flat=True))
    if waiting:
        mark_published(waiting)
    return len(waiting)


def record_failures(errors: dict[int, str]) -> None:
    ids = list(errors)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {OutboxEvent._meta.db_table} AS e
            SET attempts = e.attempts + 1, last_error = failed.error
            FROM unnest(%s::bigint[], %s::text[]) AS failed(id, error)
            WHERE e.id = failed.id
            """,
            [ids, [errors[i][:1000] for i in ids]],
        )
