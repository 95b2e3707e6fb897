from django.core.management.base import BaseCommand

from shop.services import seed_demo


class Command(BaseCommand):
    help = "Create the demo catalog, a staff superuser and a demo shopper (safe to run again)."

    def handle(self, *args, **options):
        result = seed_demo()
        self.stdout.write(
            f"catalog: {result.products_created} products created, {result.products_total} in all"
        )
        for login in result.logins:
            self.stdout.write(f"login: {login.role:<14} {login.username} / {login.password}")
        self.stdout.write(f"shopper API token: {result.shopper_token}")
        self.stdout.write(f'  try: curl -H "Authorization: Token {result.shopper_token}" '
                          "http://127.0.0.1:8000/api/auth/me")
