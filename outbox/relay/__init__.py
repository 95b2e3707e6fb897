"""The outbox relay: unpublished events -> Kafka, at least once, in order per
aggregate. `sql` reads and marks the events, `threads` overlaps that with
Kafka, `relay` ties them into runs."""

from outbox.relay.relay import OutboxRelay, new_producer, publish_outbox
from outbox.relay.sql import mark_published

__all__ = ["OutboxRelay", "mark_published", "new_producer", "publish_outbox"]
