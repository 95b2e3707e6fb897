import json
import threading
from datetime import datetime

import pytest
from django.db import connection, transaction

from outbox.models import OutboxEvent, RelayRun, UnpublishedEvent
from outbox.relay import OutboxRelay, mark_published
from outbox.services import purge_published_events, record_event
from tests.outbox.conftest import read_topic, read_topic_to_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.kafka]


def write_events(count: int, *, orders: int = 1, first_step: int = 0) -> list[OutboxEvent]:
    with transaction.atomic():
        ids = [
            record_event(
                aggregate_type="order",
                aggregate_id=i % orders,
                event_type=f"Step{first_step + i // orders}",
                data={"n": i},
            )
            for i in range(count)
        ]
    return list(OutboxEvent.objects.filter(id__in=ids).order_by("id"))


def test_record_event_refuses_to_run_outside_a_transaction():
    with pytest.raises(RuntimeError):
        record_event(aggregate_type="order", aggregate_id=1, event_type="X", data={})


def test_relay_publishes_envelope_with_key_and_headers_and_marks_published(kafka_topic):
    [event] = write_events(1)
    assert OutboxRelay().drain() == 1
    event.refresh_from_db()
    assert event.published_at is not None and event.attempts == 0
    [message] = read_topic(kafka_topic, expected=1)
    assert message.key() == b"0"
    assert dict(message.headers()) == {
        "event_id": str(event.event_id).encode(),
        "event_type": b"Step0",
        "request_id": b"",  # written outside a request
    }
    body = json.loads(message.value())
    assert datetime.fromisoformat(body.pop("occurred_at")) == event.created_at
    assert body == {
        "event_id": str(event.event_id),
        "event_type": "Step0",
        "aggregate_type": "order",
        "aggregate_id": "0",
        "data": {"n": 0},
    }


def test_the_envelope_is_valid_json_whatever_the_strings_hold(kafka_topic):
    tricky = 'A"1\\ ñ\u2028\n'  # a quote, a backslash, non-ASCII, a line separator, a newline
    data = {"note": tricky, "nested": [{"x": 1.5, "none": None, "ok": True}], "emoji": "\U0001f6d2"}
    with transaction.atomic():
        record_event(aggregate_type='order"s', aggregate_id=tricky, event_type='Odd"Type', data=data)
    assert OutboxRelay().drain() == 1
    [message] = read_topic(kafka_topic, expected=1)
    assert message.key() == tricky.encode()
    body = json.loads(message.value())
    assert (body["aggregate_type"], body["aggregate_id"], body["event_type"]) == ('order"s', tricky, 'Odd"Type')
    assert body["data"] == data


def test_runs_of_many_batches_keep_the_order_while_orders_keep_coming(kafka_topic):
    """Batches read ahead of the producer, from one snapshot per run, while
    new events commit all the time."""
    writing = threading.Event()
    writing.set()

    def write_more():
        try:
            for step in range(1, 31):
                write_events(14, orders=7, first_step=step * 2)
        finally:
            writing.clear()
            connection.close()

    first = write_events(14, orders=7)
    writer = threading.Thread(target=write_more)
    writer.start()
    relay = OutboxRelay(batch_size=9)
    published = 0
    while writing.is_set() or OutboxEvent.objects.filter(published_at__isnull=True).exists():
        published += relay.drain()
    writer.join()
    assert published == 14 * 31
    bodies = [json.loads(m.value()) for m in read_topic(kafka_topic, expected=14 * 31)]
    assert len({b["event_id"] for b in bodies}) == 14 * 31
    steps = {}
    for body in bodies:  # per partition in offset order; one order lives in one partition
        steps.setdefault(body["aggregate_id"], []).append(int(body["event_type"].removeprefix("Step")))
    assert set(steps) == {event.aggregate_id for event in first}
    assert all(got == sorted(got) and len(got) == 62 for got in steps.values())


def test_a_run_reads_ahead_inside_its_snapshot(kafka_topic):
    """An order's first event is still uncommitted (a low id) when a run starts;
    its second commits during the run (a high id). Both wait for the next run:
    a read outside the run's snapshot would publish the second first."""
    written, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow_checkout():
        try:
            with transaction.atomic():
                record_event(aggregate_type="order", aggregate_id="x", event_type="Step0", data={})
                written.set()
                release.wait(30)
            with transaction.atomic():
                record_event(aggregate_type="order", aggregate_id="x", event_type="Step1", data={})
        finally:
            done.set()
            connection.close()

    writer = threading.Thread(target=slow_checkout)
    writer.start()
    assert written.wait(30)
    write_events(60, orders=6)  # higher ids, committed: 12 batches of 5 in one run
    relay = OutboxRelay(batch_size=5)

    def commit_the_slow_checkout(ids):  # after the run's first batch; most of its reads are still to come
        if not release.is_set():
            release.set()
            assert done.wait(30)

    relay.before_mark = commit_the_slow_checkout
    assert relay.drain() == 60
    relay.before_mark = None
    assert relay.drain() == 2
    writer.join()
    bodies = [json.loads(m.value()) for m in read_topic(kafka_topic, expected=62)]
    assert len({b["event_id"] for b in bodies}) == len(bodies) == 62
    assert [b["event_type"] for b in bodies if b["aggregate_id"] == "x"] == ["Step0", "Step1"]


def test_relay_with_kafka_down_keeps_events_and_records_the_error(settings, kafka_topic):
    write_events(3)
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"
    settings.OUTBOX_FLUSH_TIMEOUT_SECONDS = 1
    relay = OutboxRelay()
    result = relay.publish_batch()
    assert (result.published, result.failed) == (0, 3)
    assert OutboxEvent.objects.filter(published_at__isnull=True, attempts=1).exclude(last_error="").count() == 3
    assert relay.retry_at > 0 and relay.producer is None
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
    settings.OUTBOX_FLUSH_TIMEOUT_SECONDS = 10
    assert relay.drain() == 3  # the same relay recovers with a new producer
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()


def test_two_relays_keep_per_order_order_and_publish_each_event_once(kafka_topic):
    events = write_events(600, orders=7)
    relays = [OutboxRelay(batch_size=50), OutboxRelay(batch_size=50)]
    done = threading.Event()

    def run(relay):
        try:
            while not done.is_set() and OutboxEvent.objects.filter(published_at__isnull=True).exists():
                relay.publish_batch()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(r,)) for r in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    done.set()
    messages = read_topic(kafka_topic, expected=600)
    bodies = [json.loads(m.value()) for m in messages]
    assert len(bodies) == 600 and len({b["event_id"] for b in bodies}) == 600  # none twice
    written = {}
    for event in events:
        written.setdefault(event.aggregate_id, []).append(str(event.event_id))
    received = {}
    for body in bodies:  # per partition in offset order; one order lives in one partition
        received.setdefault(body["aggregate_id"], []).append(body["event_id"])
    assert received == written


def test_purge_deletes_only_old_published_events(kafka_topic):
    from datetime import timedelta

    from django.utils import timezone

    old, recent, unpublished = write_events(3)
    mark_published([old.id, recent.id])
    assert set(UnpublishedEvent.objects.values_list("event_id", flat=True)) == {unpublished.id}
    OutboxEvent.objects.filter(id=old.id).update(published_at=timezone.now() - timedelta(days=8))
    OutboxEvent.objects.filter(id=recent.id).update(published_at=timezone.now() - timedelta(days=1))
    assert purge_published_events() == 1
    assert set(OutboxEvent.objects.values_list("id", flat=True)) == {recent.id, unpublished.id}


def test_every_unpublished_event_is_queued_for_the_relay_whoever_writes_it(kafka_topic):
    from datetime import timedelta

    from django.utils import timezone

    from outbox.services import Backlog, backlog

    [raw] = write_events(1)
    orm = OutboxEvent.objects.create(aggregate_type="order", aggregate_id="9", event_type="X", payload={})
    bulk = OutboxEvent.objects.bulk_create(
        [OutboxEvent(aggregate_type="order", aggregate_id="9", event_type="Y", payload={}) for _ in range(2)]
    )
    OutboxEvent.objects.create(
        aggregate_type="order", aggregate_id="9", event_type="Z", payload={}, published_at=timezone.now()
    )
    queued = {raw.id, orm.id, *(event.id for event in bulk)}
    assert set(UnpublishedEvent.objects.values_list("event_id", flat=True)) == queued
    assert backlog().waiting == 4
    oldest = OutboxEvent.objects.filter(id__in=queued).earliest("created_at").created_at
    assert backlog(now=oldest + timedelta(seconds=5)) == Backlog(4, 5.0)  # the age every screen shows
    with connection.cursor() as cursor:  # deleting an event in SQL takes it off the queue
        cursor.execute("DELETE FROM outbox_events WHERE id = %s", [orm.id])
    assert backlog().waiting == 3
    assert OutboxRelay().drain() == 3
    assert backlog() == Backlog(0, None)
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 0


def test_a_failed_batch_stops_the_run_so_later_events_of_an_order_wait(kafka_topic):
    from confluent_kafka import KafkaException

    from outbox.relay import new_producer

    first, second = write_events(2)  # the same order: Step0 then Step1
    calls = []

    def flaky_producer():
        calls.append(1)
        if len(calls) == 1:
            raise KafkaException("broker not ready")
        return new_producer()

    relay = OutboxRelay(batch_size=1, producer_factory=flaky_producer)
    assert relay.drain() == 0  # Step1 must not go out while Step0 could not
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 2
    assert OutboxEvent.objects.get(id=first.id).attempts == 1
    assert OutboxEvent.objects.get(id=second.id).attempts == 0
    relay.retry_at = 0
    assert relay.drain() == 2
    bodies = [json.loads(m.value()) for m in read_topic(kafka_topic, expected=2)]
    assert [b["event_type"] for b in bodies] == ["Step0", "Step1"]


def test_failures_are_recorded_when_staff_touched_the_events_during_the_run(monkeypatch, kafka_topic):
    from confluent_kafka import KafkaException

    [event] = write_events(1)

    def broker_down(**kwargs):
        def staff_retry_now():  # the admin action, committed while the run's snapshot is open
            OutboxEvent.objects.filter(id=event.id).update(last_error="retry requested by staff")
            connection.close()

        thread = threading.Thread(target=staff_retry_now)
        thread.start()
        thread.join()
        raise KafkaException("broker down")

    monkeypatch.setattr("outbox.relay.relay.ensure_topics", broker_down)
    result = OutboxRelay().publish_batch()
    assert (result.published, result.failed) == (0, 1)
    event.refresh_from_db()
    assert event.attempts == 1 and "broker down" in event.last_error


def event_ids(messages) -> list[str]:
    return [dict(message.headers())["event_id"].decode() for message in messages]


def test_a_run_killed_after_kafka_acknowledged_is_marked_by_the_next_leader_not_sent_again(kafka_topic):
    events = write_events(6, orders=3)
    crashing = OutboxRelay(batch_size=2)

    def killed(acked):
        raise SystemExit("killed after Kafka acknowledged, before marking")

    crashing.before_mark = killed
    with pytest.raises(SystemExit):
        crashing.drain()
    assert OutboxEvent.objects.filter(published_at__isnull=True).count() == 6  # not one mark committed
    assert RelayRun.objects.count() == 1  # the run is left unfinished
    in_kafka = set(event_ids(read_topic_to_end(kafka_topic)))
    assert in_kafka, "the crash came before anything reached Kafka: nothing to recover"

    assert OutboxRelay(batch_size=2).drain() == 6 - len(in_kafka)  # only what Kafka did not have
    assert not OutboxEvent.objects.filter(published_at__isnull=True).exists()
    assert not RelayRun.objects.exists()
    published = event_ids(read_topic_to_end(kafka_topic))
    assert sorted(published) == sorted(str(event.event_id) for event in events)  # each once


def test_a_batch_kafka_did_not_acknowledge_leaves_the_run_unfinished_until_checked(settings, kafka_topic):
    write_events(2)
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"
    settings.OUTBOX_FLUSH_TIMEOUT_SECONDS = 1
    relay = OutboxRelay()
    assert relay.publish_batch().failed == 2
    assert RelayRun.objects.count() == 1  # a timed-out message may still have been written
    relay.retry_at = 0
    result = relay.publish_batch()  # Kafka still unreachable: the run cannot be checked, nothing is sent
    assert (result.published, result.failed) == (0, 2)
    assert OutboxEvent.objects.filter(attempts=2, last_error__contains="unfinished run").count() == 2
    assert RelayRun.objects.count() == 1

    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
    settings.OUTBOX_FLUSH_TIMEOUT_SECONDS = 10
    relay.retry_at = 0
    assert relay.drain() == 2
    assert not RelayRun.objects.exists()
    assert len(read_topic_to_end(kafka_topic)) == 2


def test_an_idle_relay_writes_nothing(kafka_topic):
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        result = OutboxRelay().publish_batch()
    assert (result.published, result.failed, result.leader) == (0, 0, True)
    assert not RelayRun.objects.exists()
    # The lock, the runs left unfinished, the run's row offered (not written: nothing waits), the unlock.
    assert [query["sql"].split()[0] for query in queries] == ["SELECT", "SELECT", "INSERT", "SELECT"]


def test_a_run_with_work_records_itself_in_three_statements(kafka_topic):
    from django.test.utils import CaptureQueriesContext

    write_events(3)
    with CaptureQueriesContext(connection) as queries:
        assert OutboxRelay().publish_batch().published == 3
    statements = [" ".join(query["sql"].split()[:3]) for query in queries]
    # Before runs were recorded: lock, BEGIN, SET TRANSACTION, the mark, COMMIT, unlock (the read goes through
    # psycopg's own cursor, not counted here). Now three more: the runs left, the run's row, its delete, which
    # goes in the run's own transaction.
    assert len(statements) == 9, statements
    assert statements[1].startswith('SELECT "outbox_relay_runs"') and statements[2].startswith("INSERT INTO")
    assert statements[6].startswith("DELETE FROM outbox_relay_runs") and statements[7] == "COMMIT"
    assert not RelayRun.objects.exists()


@pytest.mark.slow
def test_a_relay_process_sigkilled_between_acknowledgement_and_mark_sends_nothing_twice(kafka_topic):
    """A real process, killed with SIGKILL at the worst moment (a fault hook
    kills it once Kafka acknowledged its second batch), then a new leader."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    events = write_events(300, orders=10)
    db = connection.settings_dict
    script = (
        "import os, signal, django; django.setup()\n"
        "from outbox.relay import OutboxRelay\n"
        "relay = OutboxRelay(batch_size=50)\n"
        "acks = []\n"
        "def kill(ids):\n"
        "    acks.append(ids)\n"
        "    if len(acks) == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
        "relay.before_mark = kill\n"
        "relay.drain()\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "KAFKA_ORDERS_TOPIC": kafka_topic,
    }
    killed = subprocess.run([sys.executable, "-c", script], env=env, cwd=settings.BASE_DIR, timeout=60)
    assert killed.returncode == -9
    assert RelayRun.objects.count() == 1
    # The first batch's mark runs on the marker's connection: committed, or not yet, at the kill.
    assert OutboxEvent.objects.filter(published_at__isnull=False).count() in (0, 50)

    assert OutboxRelay(batch_size=50).drain() <= 200  # both acknowledged batches found in Kafka
    published = event_ids(read_topic_to_end(kafka_topic))
    assert len(published) == 300
    assert sorted(published) == sorted(str(event.event_id) for event in events)
