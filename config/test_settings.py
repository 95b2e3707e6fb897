"""The test suite's settings, chosen explicitly: pyproject.toml names this module
(pytest-django), and config/settings.py reads that choice as TESTING. Everything
else is config/settings.py's."""

from config.settings import *  # noqa: F403

# The concurrency tests open a hundred connections at once on a 2-core machine that is
# running the rest of the suite too: give PostgreSQL longer than production's 5 s to
# accept them (a slow accept there is not what those tests are about).
DATABASES["default"]["OPTIONS"] = {**DATABASES["default"]["OPTIONS"], "connect_timeout": 30}  # noqa: F405

# Each test's consumers join a group of their own: a first assignment waits about half the
# session timeout, 3 s at production's 6 s, for some thirty Kafka tests.
KAFKA_SESSION_TIMEOUT_MS = 1000
# A queued checkout's send waits this long for the broker: a loaded CI machine took over a second for a
# fresh producer's first send (tests of the timeout itself set their own).
QUEUE_ADMIT_TIMEOUT_MS = 5000
