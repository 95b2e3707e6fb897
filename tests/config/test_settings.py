import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

import config.settings as config_module
from config.settings import DEV_PAYMENT_WEBHOOK_SECRET, DEV_SECRET_KEY, refuse_development_secrets


def test_settings_defaults_work_locally():
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    assert settings.DATABASES["default"]["HOST"] == "127.0.0.1"
    assert settings.KAFKA_BOOTSTRAP_SERVERS == "127.0.0.1:9092"
    assert settings.ORDER_PAYMENT_TIMEOUT_SECONDS == 900
    assert settings.CART_TTL_SECONDS == 30 * 24 * 3600
    assert settings.CART_MAX_LINES == 100
    assert settings.SHOP_CURRENCY == "EUR"
    assert config_module.EMAIL_BACKEND == "django.core.mail.backends.console.EmailBackend"  # tests swap in locmem


def test_settings_tests_use_their_own_redis_databases():
    assert settings.REDIS_URL == os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    assert settings.CELERY_BROKER_URL.endswith("/14")


def test_refuse_development_secrets_only_when_debug_is_off():
    refuse_development_secrets(debug=True, secret_key=DEV_SECRET_KEY, webhook_secret=DEV_PAYMENT_WEBHOOK_SECRET)
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY"):
        refuse_development_secrets(debug=False, secret_key=DEV_SECRET_KEY, webhook_secret="x" * 40)
    with pytest.raises(ImproperlyConfigured, match="PAYMENT_WEBHOOK_SECRET"):
        refuse_development_secrets(debug=False, secret_key="y" * 50, webhook_secret=DEV_PAYMENT_WEBHOOK_SECRET)
    refuse_development_secrets(debug=False, secret_key="y" * 50, webhook_secret="x" * 40)


def _start_django(**env):
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        timeout=60,
    )


def test_process_refuses_to_start_with_debug_off_on_dev_secret():
    result = _start_django(DEBUG="0", SECRET_KEY=DEV_SECRET_KEY)
    assert result.returncode != 0
    assert "SECRET_KEY is the development key" in result.stderr


def test_process_starts_with_debug_off_and_real_secrets():
    result = _start_django(DEBUG="0", SECRET_KEY="s" * 50, PAYMENT_WEBHOOK_SECRET="w" * 40)
    assert result.returncode == 0, result.stderr
