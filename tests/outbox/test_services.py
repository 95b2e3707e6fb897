"""The outbox's one writer: events in order, in one statement, only inside a transaction."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from outbox.models import OutboxEvent
from outbox.services import NewEvent, record_event, record_events

pytestmark = pytest.mark.django_db


def test_many_events_are_one_insert_and_keep_their_order():
    events = [NewEvent("order", n, "OrderCancelled", {"order_id": n, "note": 'ü \\ "quoted"'}) for n in range(50)]
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        ids = record_events(events)
    inserts = [q for q in captured.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1
    assert ids == sorted(ids) and len(set(ids)) == 50
    stored = OutboxEvent.objects.in_bulk(ids)
    assert [stored[i].payload["order_id"] for i in ids] == list(range(50))
    assert [stored[i].aggregate_id for i in ids] == [str(n) for n in range(50)]
    assert stored[ids[0]].payload["note"] == 'ü \\ "quoted"'
    assert len({stored[i].event_id for i in ids}) == 50


def test_one_event_is_the_same_row_as_in_a_batch():
    with transaction.atomic():
        [batch_id] = record_events([NewEvent("order", 7, "OrderPaid", {"total": 1})])
        single_id = record_event(aggregate_type="order", aggregate_id=7, event_type="OrderPaid", data={"total": 1})
    fields = ["aggregate_type", "aggregate_id", "event_type", "payload", "attempts", "last_error"]
    rows = OutboxEvent.objects.filter(id__in=[batch_id, single_id]).order_by("id").values(*fields)
    assert rows[0] == rows[1]


@pytest.mark.django_db(transaction=True)
def test_no_event_outside_the_transaction_of_its_change():
    with pytest.raises(RuntimeError):
        record_events([NewEvent("order", 1, "X", {})])
