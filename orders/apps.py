from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from orders import handlers, signals  # noqa: F401 - handlers register the consumer's handlers

        signals.connect()
