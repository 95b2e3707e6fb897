"""The long-running processes stop cleanly on SIGTERM (what honcho, systemd and
Kubernetes send): exit code 0, nothing left half-done."""

import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka, pytest.mark.slow]


def start(args, tmp_path, kafka_topic):
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "KAFKA_ORDERS_TOPIC": kafka_topic,
        "KAFKA_CONSUMER_GROUP_PREFIX": f"{kafka_topic}.",
        "LOG_FORMAT": "plain",
    }
    log = open(tmp_path / "process.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "manage.py", *args], env=env, cwd=settings.BASE_DIR, stdout=log, stderr=subprocess.STDOUT
    )
    return process, log


@pytest.mark.parametrize("args", [["relay_outbox"], ["consume_events", "loyalty"], ["write_queued_orders"]])
def test_sigterm_stops_the_process_cleanly(args, tmp_path, kafka_topic):
    process, log = start(args, tmp_path, kafka_topic)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "Ctrl-C to stop" not in (tmp_path / "process.log").read_text():
            time.sleep(0.2)
        time.sleep(1)  # into its loop
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, (tmp_path / "process.log").read_text()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
