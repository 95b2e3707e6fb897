from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from shop import handlers, signals  # noqa: F401 - handlers register the loyalty consumer

        signals.connect()
