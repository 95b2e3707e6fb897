from django.conf import settings
from django.core.management.base import BaseCommand

from outbox.topics import dead_letter_topic, ensure_topics


class Command(BaseCommand):
    help = "Create the shop's Kafka topics if they are missing."

    def handle(self, *args, **options):
        topic = settings.KAFKA_ORDERS_TOPIC
        created = ensure_topics(topics=[topic, dead_letter_topic(topic)])
        for name in (topic, dead_letter_topic(topic)):
            self.stdout.write(f"{name}: {'created' if name in created else 'exists'}")
