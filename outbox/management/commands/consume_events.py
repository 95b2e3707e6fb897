from django.core.management.base import BaseCommand, CommandError

from core.metrics import serve_own_metrics
from outbox.consumers import HANDLERS, EventConsumer
from outbox.shutdown import stop_on_sigterm


class Command(BaseCommand):
    help = "Run one event consumer (warehouse, email, loyalty or payments) until SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("name", help="warehouse | email | loyalty | payments")

    def handle(self, *args, name, **options):
        if name not in HANDLERS:
            raise CommandError(f"unknown consumer {name!r}; choose from {', '.join(sorted(HANDLERS))}")
        stop = stop_on_sigterm()
        serve_own_metrics()
        consumer = EventConsumer(name=name)
        self.stdout.write(f"consumer {name}: reading {consumer.topic} (Ctrl-C to stop)")
        consumer.run(should_stop=stop.is_set)
        self.stdout.write(
            f"consumer {name}: stopped after {consumer.processed} processed, "
            f"{consumer.duplicates} duplicates, {consumer.dead_lettered} dead-lettered"
        )
