"""Django's `changepassword`, which also revokes the user's API tokens: a password
changed from the shell ends every session, as it does from the API and the admin."""

import getpass

from django.contrib.auth import get_user_model
from django.contrib.auth.management.commands import changepassword
from django.db import transaction

from shop.services import revoke_tokens


class Command(changepassword.Command):
    help = "Change a user's password (Django's command) and revoke every API token of the user."

    def handle(self, *args, **options):
        with transaction.atomic(using=options["database"]):
            message = super().handle(*args, **options)
            users = get_user_model()._default_manager.db_manager(options["database"])
            revoke_tokens(user=users.get_by_natural_key(options["username"] or getpass.getuser()))
        return message
