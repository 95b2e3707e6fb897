from django.core.management.base import BaseCommand

from core.metrics import serve_own_metrics
from outbox.relay import OutboxRelay
from outbox.shutdown import stop_on_sigterm


class Command(BaseCommand):
    help = "Publish outbox events to Kafka: a long-running loop (or --once to drain and exit)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="publish what is waiting, then exit")
        parser.add_argument("--batch-size", type=int, default=None)

    def handle(self, *args, once, batch_size, **options):
        relay = OutboxRelay(batch_size=batch_size)
        if once:
            self.stdout.write(f"{relay.drain()} event(s) published")
            return
        stop = stop_on_sigterm()
        serve_own_metrics()
        self.stdout.write(f"relaying the outbox to {relay.topic} (Ctrl-C to stop)")
        relay.run_forever(should_stop=stop.is_set)
