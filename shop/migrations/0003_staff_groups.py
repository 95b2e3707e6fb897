"""Staff groups: what each kind of staff user may see and do in the admin."""

from django.db import migrations

from shop.migrations import _groups

GROUPS = {
    "Stock managers": {
        "shop.product": ["view", "add", "change"],
        "inventory.stock": ["view", "change"],
        "inventory.stockmovement": ["view"],
        "inventory.flashsale": ["view"],
        "inventory.shipment": ["view"],
    },
    "Order managers": {
        "orders.order": ["view", "change"],
        "orders.orderitem": ["view"],
        "orders.payment": ["view"],
        "orders.refund": ["view"],
        "inventory.stock": ["view"],
        "inventory.shipment": ["view"],
        "outbox.outboxevent": ["view"],
        "outbox.processedevent": ["view"],
    },
}


def delete_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("shop", "0002_loyaltyentry"),
        ("inventory", "0003_flashsale"),
        ("orders", "0003_notification"),
        ("outbox", "0002_processedevent"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(_groups.granter(GROUPS), delete_groups)]
