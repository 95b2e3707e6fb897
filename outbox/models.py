import uuid

from django.db import models


class OutboxEvent(models.Model):
    """An event written in the same transaction as the change it announces;
    the relay publishes it to Kafka and sets `published_at`. A trigger queues
    every new unpublished event in `UnpublishedEvent` (migration 0004)."""

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    aggregate_type = models.CharField(max_length=50)
    aggregate_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=50)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # The request that caused the event, relayed as a Kafka header for tracing.
    request_id = models.CharField(max_length=128, blank=True, default="")

    class Meta:
        db_table = "outbox_events"
        ordering = ["id"]
        indexes = [models.Index(fields=["aggregate_type", "aggregate_id"], name="outbox_aggregate")]

    def __str__(self) -> str:
        return f"{self.event_type} {self.aggregate_type}:{self.aggregate_id}"


class UnpublishedEvent(models.Model):
    """The relay's queue: a row per event not yet published, inserted by a
    trigger on outbox_events and deleted by the statement that sets
    `published_at`. It replaces a partial index on `published_at IS NULL`:
    with such an index, marking an event published had to write a new entry
    in every index of the table; now that UPDATE is a HOT update (the table
    keeps room for it, fillfactor 50) and the queue row is simply deleted
    (bench/README.md, "Figures behind code choices")."""

    # The foreign key is made by migration 0004 with ON DELETE CASCADE: deleting
    # an event, in SQL too, takes it off the queue (PostgreSQL does it).
    event = models.OneToOneField(
        OutboxEvent,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_column="id",
        db_constraint=False,
        related_name="pending",
    )

    class Meta:
        db_table = "outbox_pending"
        ordering = ["event"]

    def __str__(self) -> str:
        return f"waiting: {self.event_id}"


class ProcessedEvent(models.Model):
    """The consumer-side ledger: a row per (consumer, event) applied. Inserted in
    the same transaction as the handler's effect, so a redelivered event is seen
    and skipped."""

    consumer = models.CharField(max_length=50)
    event_id = models.UUIDField()
    event_type = models.CharField(max_length=50)
    processed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "processed_events"
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["consumer", "event_id"], name="processed_event_once_per_consumer")
        ]

    def __str__(self) -> str:
        return f"{self.consumer}: {self.event_type} {self.event_id}"


class RelayRun(models.Model):
    """A relay run that may have produced events it has not marked published:
    written before the run's first produce, deleted once every event it
    produced is marked. The next leader that finds one (the run's process was
    killed, or Kafka did not acknowledge everything) reads what the topic got
    since `started_at` and marks those events instead of publishing them
    again (outbox/relay/recovery.py)."""

    topic = models.CharField(max_length=249)  # Kafka's longest topic name
    # The relay's own clock: the messages' CreateTime comes from the same host.
    started_at = models.DateTimeField()

    class Meta:
        db_table = "outbox_relay_runs"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"relay run on {self.topic} since {self.started_at:%Y-%m-%d %H:%M:%S}"
