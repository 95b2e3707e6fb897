"""Exporting orders (their addresses) is a permission of its own, held by the
order managers; before, anyone who could view the list could export it."""

from django.db import migrations

from shop.migrations import _groups

GRANTS = {"Order managers": {"orders.order": ["export"]}}


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for group in Group.objects.filter(name__in=GRANTS):
        group.permissions.remove(*group.permissions.filter(codename="export_order"))


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0010_queued_order_alias"),
        ("shop", "0007_address_product_details"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="order",
            options={"ordering": ["-id"], "permissions": [("export_order", "Can export orders as CSV")]},
        ),
        migrations.RunPython(_groups.granter(GRANTS), revoke),
    ]
