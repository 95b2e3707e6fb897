"""Stock managers schedule, edit and end flash sales in the admin."""

from django.db import migrations

from shop.migrations import _groups

GRANTS = {"Stock managers": {"inventory.flashsale": ["add", "change", "delete"]}}


class Migration(migrations.Migration):
    dependencies = [("inventory", "0009_flash_sale_window"), ("shop", "0003_staff_groups")]

    operations = [migrations.RunPython(_groups.granter(GRANTS), migrations.RunPython.noop)]
