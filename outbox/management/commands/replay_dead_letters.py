from django.core.management.base import BaseCommand, CommandError

from outbox.consumers import HANDLERS
from outbox.dead_letters import already_applied, read_dead_letters, replay


class Command(BaseCommand):
    help = (
        "Put a consumer's dead-lettered events back through its handler, once the cause is fixed; "
        "an event the consumer applied since is skipped. Reports each."
    )

    def add_arguments(self, parser):
        parser.add_argument("consumer", help=" | ".join(sorted(HANDLERS)))
        parser.add_argument("--event-id", help="only this event")
        parser.add_argument("--dry-run", action="store_true", help="list what would be replayed, change nothing")

    def handle(self, *args, consumer, event_id, dry_run, **options):
        if consumer not in HANDLERS:
            raise CommandError(f"no consumer {consumer!r}: one of {', '.join(sorted(HANDLERS))}")
        letters = read_dead_letters(consumer=consumer, event_id=event_id)
        failed = 0
        for letter in letters:
            event = letter.event
            where = f"{event.event_type} {event.event_id} (dead letter {letter.partition}:{letter.offset})"
            if dry_run:
                state = "applied since" if already_applied(consumer=consumer, letter=letter) else "would be replayed"
                self.stdout.write(f"{where}: {state}; it failed with {letter.error[:120]}")
                continue
            try:
                result = replay(consumer=consumer, letter=letter)
            except Exception as error:  # reported; the other letters still go
                failed += 1
                self.stdout.write(f"{where}: FAILED again: {type(error).__name__}: {str(error)[:200]}")
            else:
                self.stdout.write(f"{where}: {result}")
        self.stdout.write(
            f"{len(letters)} dead letter(s) of {consumer}"
            + (", dry run" if dry_run else "")
            + (f", {failed} failed again" if failed else "")
        )
        if failed:
            raise CommandError(f"{failed} dead letter(s) failed again")
