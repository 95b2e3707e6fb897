import os

from django.conf import settings
from django.core.management.base import BaseCommand

from core.metrics import serve_own_metrics
from orders.queue_writer import QueueWriter
from outbox.shutdown import stop_on_sigterm
from outbox.topics import ensure_topics


class Command(BaseCommand):
    help = "Write queue-mode flash-sale checkouts from Kafka in batches, until SIGTERM (which finishes the batch)."

    def handle(self, *args, **options):
        stop = stop_on_sigterm()
        if settings.QUEUE_WRITER_NICE:
            os.nice(settings.QUEUE_WRITER_NICE)  # the web tier first on a shared host (settings.py)
        serve_own_metrics()
        ensure_topics(topics=[settings.KAFKA_CHECKOUT_TOPIC])  # checkouts cannot be queued before it exists
        writer = QueueWriter()
        self.stdout.write(f"order writer: reading {writer.topic} (Ctrl-C to stop)")
        writer.run(should_stop=stop.is_set)
        self.stdout.write(
            f"order writer: stopped after {writer.batches} batches, {writer.written} orders written, "
            f"{writer.rejected} rejected"
        )
