from django.apps import AppConfig


class ConfigConfig(AppConfig):
    """Holds the shop's project-wide templates (the admin index) and nothing else."""

    name = "config"
