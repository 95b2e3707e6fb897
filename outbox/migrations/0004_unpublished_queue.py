import django.db.models.deletion
from django.db import migrations, models


# Every event written unpublished is queued for the relay, whoever writes it
# (the ORM, raw SQL, bulk inserts): one statement-level trigger.
ENQUEUE = """
CREATE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_pending (id) SELECT id FROM new_events WHERE published_at IS NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_enqueue AFTER INSERT ON outbox_events
    REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION outbox_enqueue();
INSERT INTO outbox_pending (id) SELECT id FROM outbox_events WHERE published_at IS NULL;
-- Deleting an event (in SQL too) takes it off the queue.
ALTER TABLE outbox_pending ADD CONSTRAINT outbox_pending_event
    FOREIGN KEY (id) REFERENCES outbox_events (id) ON DELETE CASCADE;
-- Room on every page for the new version of each row when it is marked
-- published, so that the UPDATE is HOT (no index entries). New pages only;
-- VACUUM FULL outbox_events applies it to the old ones.
ALTER TABLE outbox_events SET (fillfactor = 50);
"""

DROP_ENQUEUE = """
ALTER TABLE outbox_events RESET (fillfactor);
DROP TRIGGER outbox_enqueue ON outbox_events;
DROP FUNCTION outbox_enqueue();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('outbox', '0003_outboxevent_request_id'),
    ]

    operations = [
        migrations.CreateModel(
            name='UnpublishedEvent',
            fields=[
                ('event', models.OneToOneField(db_column='id', db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='pending', serialize=False, to='outbox.outboxevent')),
            ],
            options={
                'db_table': 'outbox_pending',
                'ordering': ['event'],
            },
        ),
        migrations.RunSQL(ENQUEUE, DROP_ENQUEUE),
        migrations.RemoveIndex(
            model_name='outboxevent',
            name='outbox_unpublished',
        ),
    ]
