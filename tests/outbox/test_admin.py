"""outbox/admin.py: the outbox events in the admin (and their count on its index page)."""

import pytest

from outbox.models import OutboxEvent
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db


def test_outbox_admin_retry_and_index_counts():
    admin = staff_client(superuser=True)
    from django.db import transaction

    from outbox.services import record_event

    with transaction.atomic():
        record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
    index = admin.get("/admin/")
    assert index.context["outbox_waiting"] == 1
    assert b'id="outbox-waiting">1<' in index.content
    event = OutboxEvent.objects.get()
    response = admin.post(
        "/admin/outbox/outboxevent/", {"action": "retry_now", "_selected_action": [event.id]}, follow=True
    )
    assert response.status_code == 200
    assert OutboxEvent.objects.get().last_error == "retry requested by staff"


def test_outbox_admin_filters_by_the_relay_queue_and_retries_only_waiting_events():
    admin = staff_client(superuser=True)
    from django.db import transaction

    from outbox.relay import mark_published
    from outbox.services import record_event

    with transaction.atomic():
        waiting = record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})
        published = record_event(aggregate_type="order", aggregate_id=2, event_type="X", data={})
    mark_published([published])
    for value, expected in (("no", [waiting]), ("yes", [published])):
        response = admin.get(f"/admin/outbox/outboxevent/?published={value}")
        assert [event.id for event in response.context["cl"].result_list] == expected
    admin.post("/admin/outbox/outboxevent/", {"action": "retry_now", "_selected_action": [waiting, published]})
    assert dict(OutboxEvent.objects.values_list("id", "last_error")) == {
        waiting: "retry requested by staff",
        published: "",
    }
