"""Shared by the staff-group data migrations."""

from django.contrib.auth.management import create_permissions


def granter(groups: dict[str, dict[str, list[str]]]):
    def grant(apps, schema_editor):
        # Permissions are normally created after all migrations ran; make sure they exist now.
        for app_config in apps.get_app_configs():
            app_config.models_module = True
            create_permissions(app_config, verbosity=0)
            app_config.models_module = None
        Group = apps.get_model("auth", "Group")
        Permission = apps.get_model("auth", "Permission")
        for name, grants in groups.items():
            group, _ = Group.objects.get_or_create(name=name)
            for label, actions in grants.items():
                app_label, model = label.split(".")
                for action in actions:
                    group.permissions.add(
                        Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}")
                    )

    return grant


def revoker(groups: dict[str, dict[str, list[str]]]):
    def revoke(apps, schema_editor):
        Group = apps.get_model("auth", "Group")
        Permission = apps.get_model("auth", "Permission")
        for name, grants in groups.items():
            group = Group.objects.filter(name=name).first()
            if group is None:
                continue
            for label, actions in grants.items():
                app_label, model = label.split(".")
                codenames = [f"{action}_{model}" for action in actions]
                group.permissions.remove(
                    *Permission.objects.filter(content_type__app_label=app_label, codename__in=codenames)
                )

    return revoke
