import uuid

from django.db import models


class OutboxEvent(models.Model):
    """An event written in the same transaction as the change it announces;
    the relay publishes it to Kafka and sets `published_at`."""

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
        indexes = [
            models.Index(fields=["id"], condition=models.Q(published_at__isnull=True), name="outbox_unpublished"),
            models.Index(fields=["aggregate_type", "aggregate_id"], name="outbox_aggregate"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.aggregate_type}:{self.aggregate_id}"


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
