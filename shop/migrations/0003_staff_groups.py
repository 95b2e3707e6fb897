"""Staff groups: what each kind of staff user may see and do in the admin."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

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


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations ran; make sure they exist now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, grants in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for label, actions in grants.items():
            app_label, model = label.split(".")
            for action in actions:
                group.permissions.add(
                    Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}")
                )


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

    operations = [migrations.RunPython(create_groups, delete_groups)]
