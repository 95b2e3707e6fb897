from django.conf import settings
from django.core.management.base import BaseCommand

from outbox.topics import ensure_topics


class Command(BaseCommand):
    help = "Create the shop's Kafka topics if they are missing, and check their partition counts."

    def handle(self, *args, **options):
        expected = settings.KAFKA_TOPIC_PARTITIONS
        for topic in ensure_topics():
            state = "created" if topic.created else "exists"
            self.stdout.write(f"{topic.name}: {state}, {topic.partitions} partitions")
            if topic.partitions != expected:
                self.stderr.write(
                    self.style.ERROR(
                        f"WARNING: {topic.name} has {topic.partitions} partitions, expected {expected} "
                        "(KAFKA_TOPIC_PARTITIONS). Events of one order are only kept in order within one "
                        "partition count: see docs/operations.md, partition counts."
                    )
                )
