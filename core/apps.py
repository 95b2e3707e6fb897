from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Platform code every app uses: errors, API base views, token auth, rate
    limits, Redis scripts, Kafka client settings, request ids, the metrics
    registry. It imports no app of the shop."""

    name = "core"

    def ready(self) -> None:
        from core import schema_auth  # noqa: F401 - registers the OpenAPI description of token auth
