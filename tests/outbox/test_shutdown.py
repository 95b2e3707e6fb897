"""The long-running processes stop cleanly on SIGTERM (what honcho, systemd and
Kubernetes send): exit code 0, nothing left half-done."""

import os
import signal
import subprocess
import sys

import pytest
from confluent_kafka import ConsumerGroupState
from django.conf import settings
from django.db import connection

from core.kafka import admin_client
from orders.queue_writer import WRITER_GROUP
from tests.helpers import wait_until

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


def group_state(admin, group: str) -> ConsumerGroupState:
    return admin.describe_consumer_groups([group])[group].result(timeout=10).state


@pytest.mark.parametrize(
    "args, group",
    [(["relay_outbox"], None), (["consume_events", "loyalty"], "loyalty"), (["write_queued_orders"], WRITER_GROUP)],
)
def test_sigterm_stops_the_process_cleanly(args, group, tmp_path, kafka_topic):
    process, log = start(args, tmp_path, kafka_topic)
    output = tmp_path / "process.log"
    group, admin = group and f"{kafka_topic}.{group}", admin_client()  # the group prefix start() gives

    def in_its_loop() -> bool:
        """The relay says so; a consumer (the queue's writer too) has joined its group, by polling."""
        if group is None:
            return "relay: publishing outbox events" in output.read_text()
        return group_state(admin, group) == ConsumerGroupState.STABLE

    try:
        assert wait_until(in_its_loop, 30), output.read_text()[-2000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, output.read_text()[-2000:]
        if group:
            assert group_state(admin, group) == ConsumerGroupState.EMPTY  # it left the group, not timed out of it
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
