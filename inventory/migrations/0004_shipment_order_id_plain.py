"""The warehouse keeps the order id it received in the event as a plain column:
no foreign key into the orders app above it. The column and its unique index
stay as they are; only the foreign-key constraint goes."""

from django.db import migrations, models

DROP_FOREIGN_KEY = """
DO $$
DECLARE name text;
BEGIN
    FOR name IN
        SELECT conname FROM pg_constraint
        WHERE conrelid = 'inventory_shipment'::regclass AND contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE inventory_shipment DROP CONSTRAINT %I', name);
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0003_flashsale")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="shipment", name="order"),
                migrations.AddField(
                    model_name="shipment",
                    name="order_id",
                    field=models.BigIntegerField(unique=True),
                    preserve_default=False,
                ),
            ],
            database_operations=[migrations.RunSQL(DROP_FOREIGN_KEY, migrations.RunSQL.noop)],
        )
    ]
