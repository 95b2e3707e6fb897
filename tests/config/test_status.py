"""config/status.py and `manage.py shop_status`: one screen of read-only figures."""

import pytest
from django.core.management import call_command
from django.db import transaction

from outbox.services import record_event

pytestmark = pytest.mark.django_db


def test_shop_status_prints_one_screen(capsys, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # Kafka down: the rest still shows
    with transaction.atomic():
        record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
    call_command("shop_status")
    out = capsys.readouterr().out
    assert "outbox waiting for Kafka: 1" in out
    assert "unavailable" in out
