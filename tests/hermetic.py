"""Loaded before Django (pyproject: `-p tests.hermetic`): the suite runs on the
settings' defaults whatever the caller exported (ORDER_PAYMENT_TIMEOUT_SECONDS=5
make test passes). Only where the services are, and the tests' own databases,
still come from the environment."""

import os
import re
from pathlib import Path

KEPT = {"DATABASE_URL", "TEST_DATABASE_NAME", "TEST_REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS", "LOG_LEVEL", "LOG_FORMAT"}
_SETTINGS = Path(__file__).resolve().parent.parent / "config" / "settings.py"
READ_BY_SETTINGS = set(re.findall(r'\benv(?:_int|_bool|_list)?\("([A-Z_]+)"', _SETTINGS.read_text()))

for name in READ_BY_SETTINGS - KEPT:
    os.environ.pop(name, None)
