"""The shop's benchmarks, run as `python -m bench.NAME` from the repository root (bench/README.md). Importing the
package sets Django up on config.settings, production-like (values already in the environment win), on the
development database and Redis."""

import os
import secrets

import django

LIFTED = dict.fromkeys(  # bench shoppers hold many unpaid orders
    ["MAX_PENDING_ORDERS_PER_CUSTOMER", "MAX_UNPAID_UNITS_PER_SKU", "MAX_UNPAID_UNITS_PER_ADDRESS"], "1000000000"
)
# DEBUG off needs secrets of its own, made afresh for each run (a committed one would be refused).
PRODUCTION_LIKE_ENV = {"DEBUG": "0", "SECURE_SSL_REDIRECT": "0", "LOG_LEVEL": "WARNING", **LIFTED}
PRODUCTION_LIKE_ENV |= {"SECRET_KEY": secrets.token_urlsafe(64), "PAYMENT_WEBHOOK_SECRET": secrets.token_urlsafe(40)}
for key, value in PRODUCTION_LIKE_ENV.items():
    os.environ.setdefault(key, value)
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
django.setup()
