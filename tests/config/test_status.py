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


def test_a_broker_that_does_not_answer_is_asked_once_not_once_per_group(settings, monkeypatch):
    """outbox/lag.py: with Kafka down, every group reports the error of the one call that was made."""
    from outbox import lag

    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"
    asked = []

    class CountingConsumer(lag.Consumer):
        def list_topics(self, *args, **kwargs):
            asked.append(args)
            return super().list_topics(*args, **kwargs)

    monkeypatch.setattr(lag, "Consumer", CountingConsumer)
    positions = lag.consumer_positions(extra={"order-writer": settings.KAFKA_CHECKOUT_TOPIC}, timeout=0.5)

    assert len(positions) > 2 and len(asked) == 1
    assert all("error" in position for position in positions.values())
