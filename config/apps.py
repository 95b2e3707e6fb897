from django.apps import AppConfig


class ConfigConfig(AppConfig):
    """Holds the shop's project-wide templates (the admin index) and the OpenAPI
    description of its token authentication."""

    name = "config"

    def ready(self) -> None:
        from config import schema_auth  # noqa: F401 - registers the extension
