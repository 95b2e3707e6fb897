from django.db import migrations

from shop.migrations import _groups

GRANTS = {"Order managers": {"orders.notification": ["view"], "shop.loyaltyentry": ["view"]}}


class Migration(migrations.Migration):
    dependencies = [("shop", "0003_staff_groups")]

    operations = [migrations.RunPython(_groups.granter(GRANTS), migrations.RunPython.noop)]
