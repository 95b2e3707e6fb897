"""Every existing account gets its pending-order counter (new ones get it when
created: orders/signals.py), so that checkout takes a slot with one UPDATE."""

from django.conf import settings
from django.db import migrations


def add_counters(apps, schema_editor):
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    PendingOrderCount = apps.get_model("orders", "PendingOrderCount")
    user_ids = User.objects.values_list("pk", flat=True).iterator(chunk_size=10_000)
    batch = []
    for user_id in user_ids:
        batch.append(PendingOrderCount(customer_id=user_id, pending=0))
        if len(batch) == 10_000:
            PendingOrderCount.objects.bulk_create(batch, ignore_conflicts=True)
            batch = []
    PendingOrderCount.objects.bulk_create(batch, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0005_pending_order_count"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(add_counters, migrations.RunPython.noop)]
