from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config.demo import seed_demo

CONFIRM = "--i-know-this-is-not-production"


class Command(BaseCommand):
    help = "Create the demo catalog, a staff superuser and a demo shopper (safe to run again)."

    def add_arguments(self, parser):
        parser.add_argument(
            CONFIRM,
            action="store_true",
            dest="not_production",
            help="seed with DEBUG off (a staging copy, say): demo users then get random passwords",
        )

    def handle(self, *args, not_production: bool, **options):
        if not settings.DEBUG and not not_production:
            raise CommandError(
                f"DEBUG is off: this looks like production, where demo logins must not exist. "
                f"Run with {CONFIRM} if it is not."
            )
        result = seed_demo(random_passwords=not settings.DEBUG)
        self.stdout.write(f"catalog: {result.products_created} products created, {result.products_total} in all")
        for login in result.logins:
            self.stdout.write(f"login: {login.role:<14} {login.username} / {login.password}")
        if not settings.DEBUG:
            self.stdout.write("the passwords above are random and shown only this once")
        self.stdout.write(f"shopper API token: {result.shopper_token}")
        self.stdout.write(
            f'  try: curl -H "Authorization: Token {result.shopper_token}" http://127.0.0.1:8000/api/auth/me'
        )
