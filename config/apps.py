from django.apps import AppConfig


class ConfigConfig(AppConfig):
    """The wiring: settings, URLs, WSGI, Celery, gunicorn, the admin site, and the
    reports that look at every app (`shop_status`, /readyz, the live gauges of
    /metrics). Nothing below imports it."""

    name = "config"
