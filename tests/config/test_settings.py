import os
import re
import secrets
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

import config.settings as config_module
from config.settings import (
    COMMITTED_SECRETS,
    DEV_PAYMENT_WEBHOOK_SECRET,
    DEV_SECRET_KEY,
    application_name,
    refuse_development_secrets,
)


def test_settings_defaults_work_locally():
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    assert settings.DATABASES["default"]["HOST"] == "127.0.0.1"
    assert settings.KAFKA_BOOTSTRAP_SERVERS == "127.0.0.1:9092"
    assert settings.ORDER_PAYMENT_TIMEOUT_SECONDS == 900
    assert settings.CART_TTL_SECONDS == 30 * 24 * 3600
    assert settings.CART_MAX_LINES == 100
    assert settings.SHOP_CURRENCY == "EUR"
    assert config_module.EMAIL_BACKEND == "django.core.mail.backends.console.EmailBackend"  # tests swap in locmem


@pytest.mark.django_db
def test_each_process_names_its_database_connections():
    assert application_name(["manage.py", "relay_outbox"], "2") == "shop relay_outbox node 2"
    assert application_name(["/venv/bin/celery", "-A", "config", "beat", "-s", "x"], "1") == "shop celery beat node 1"
    assert application_name(["/venv/bin/gunicorn", "config.wsgi"], "") == "shop gunicorn"
    assert len(application_name(["manage.py", "x" * 100], "12")) == 63
    with connection.cursor() as cursor:  # the setting reaches PostgreSQL
        cursor.execute("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()")
        assert cursor.fetchone()[0] == settings.DATABASES["default"]["OPTIONS"]["application_name"]


def test_settings_tests_use_their_own_redis_databases():
    assert settings.REDIS_URL == os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    assert settings.CELERY_BROKER_URL.endswith("/14")


STRONG_KEY = secrets.token_urlsafe(64)
STRONG_WEBHOOK_SECRET = secrets.token_urlsafe(40)
# The environment of a process started outside `make run` and outside pytest.
_NOT_OURS = ("DEBUG", "SECRET_KEY", "PAYMENT_WEBHOOK_SECRET", "PYTEST_VERSION", "DJANGO_SETTINGS_MODULE")


def test_refuse_development_secrets_only_when_debug_is_off():
    refuse_development_secrets(debug=True, secret_key=DEV_SECRET_KEY, webhook_secret=DEV_PAYMENT_WEBHOOK_SECRET)
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is a value committed"):
        refuse_development_secrets(debug=False, secret_key=DEV_SECRET_KEY, webhook_secret=STRONG_WEBHOOK_SECRET)
    with pytest.raises(ImproperlyConfigured, match="PAYMENT_WEBHOOK_SECRET is a value committed"):
        refuse_development_secrets(debug=False, secret_key=STRONG_KEY, webhook_secret=DEV_PAYMENT_WEBHOOK_SECRET)
    refuse_development_secrets(debug=False, secret_key=STRONG_KEY, webhook_secret=STRONG_WEBHOOK_SECRET)


@pytest.mark.parametrize("secret", sorted(COMMITTED_SECRETS))
def test_every_committed_secret_is_refused_for_both_settings(secret):
    with pytest.raises(ImproperlyConfigured, match="committed"):
        refuse_development_secrets(debug=False, secret_key=secret, webhook_secret=STRONG_WEBHOOK_SECRET)
    with pytest.raises(ImproperlyConfigured, match="committed"):
        refuse_development_secrets(debug=False, secret_key=STRONG_KEY, webhook_secret=secret)


@pytest.mark.parametrize(
    "key,webhook,message",
    [
        ("", STRONG_WEBHOOK_SECRET, "SECRET_KEY is not set"),
        (STRONG_KEY, "", "PAYMENT_WEBHOOK_SECRET is not set"),
        ("k" * 60, STRONG_WEBHOOK_SECRET, "SECRET_KEY is too weak"),  # long, but one character
        ("abcd" * 15, STRONG_WEBHOOK_SECRET, "SECRET_KEY is too weak"),  # four different
        (STRONG_KEY[:49], STRONG_WEBHOOK_SECRET, "SECRET_KEY is too weak"),
        (STRONG_KEY, "short-secret", "PAYMENT_WEBHOOK_SECRET is too weak"),
        (STRONG_KEY, "a" * 32, "PAYMENT_WEBHOOK_SECRET is too weak"),  # long enough, but one character
        (STRONG_KEY, "abcd" * 10, "PAYMENT_WEBHOOK_SECRET is too weak"),
    ],
)
def test_weak_or_missing_secrets_are_refused(key, webhook, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        refuse_development_secrets(debug=False, secret_key=key, webhook_secret=webhook)


def test_both_secrets_follow_one_strength_rule_each_with_its_own_length():
    refuse_development_secrets(debug=False, secret_key="abcde" * 10, webhook_secret="abcde" * 7 + "ab")  # 50, 37
    with pytest.raises(ImproperlyConfigured, match="PAYMENT_WEBHOOK_SECRET is too weak: 32 or more characters, 5 "):
        refuse_development_secrets(debug=False, secret_key=STRONG_KEY, webhook_secret="abcde" * 6 + "a")  # 31
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is too weak: 50 or more characters, 5 of them"):
        refuse_development_secrets(debug=False, secret_key="abcd" * 20, webhook_secret=STRONG_WEBHOOK_SECRET)


# SECRET_KEY = "x", "SECRET_KEY": "x", SECRET_KEY: x, and a shell default ${SECRET_KEY:-x}
_ASSIGNED = re.compile(
    r"""(?:SECRET_KEY|WEBHOOK_SECRET):-([^}\s]{8,})\}"""
    r"""|(?:SECRET_KEY|WEBHOOK_SECRET)["']?\s*[:=]\s*["']?([^"'$\s,)}]{8,})"""
)


def test_no_secret_is_committed_that_the_shop_would_accept():
    """Every value the repository assigns to a secret is on the refused list."""
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=settings.BASE_DIR, check=True)
    found = {}
    for name in files.stdout.split():
        path = settings.BASE_DIR / name
        if not path.is_file() or path.suffix in {".png", ".ico"}:
            continue
        for value in (a or b for a, b in _ASSIGNED.findall(path.read_text(errors="replace"))):
            is_a_name = value.isidentifier() and value.upper() == value  # STRONG_KEY, a constant
            if not is_a_name and not value.startswith(("env(", "settings.", "os.environ", "secrets.", "<")):
                found.setdefault(value, name)
    assert found, "the scan found nothing: it no longer matches how secrets are written"
    accepted = {value: name for value, name in found.items() if value not in COMMITTED_SECRETS}
    assert not accepted, f"committed secrets the shop would run on: {accepted}"


def _start_django(*command: str, **env):
    base = {key: value for key, value in os.environ.items() if key not in _NOT_OURS}
    return subprocess.run(
        [sys.executable, "manage.py", *(command or ["check"])],
        env={**base, **env},
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        timeout=60,
    )


def test_a_process_not_started_by_make_run_has_debug_off_and_needs_secrets():
    result = _start_django("shell", "-c", "from django.conf import settings; print(settings.DEBUG)")
    assert result.returncode != 0
    assert "DEBUG is off and SECRET_KEY is not set" in result.stderr
    result = _start_django(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.DEBUG)",
        SECRET_KEY=STRONG_KEY,
        PAYMENT_WEBHOOK_SECRET=STRONG_WEBHOOK_SECRET,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_database_url_options_are_kept_beside_ours():
    result = _start_django(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.DATABASES['default']['OPTIONS'])",
        DEBUG="1",
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/shop?sslmode=disable",
        SHOP_NODE="3",
    )
    assert result.returncode == 0, result.stderr
    options = result.stdout.strip().splitlines()[-1]
    assert "'sslmode': 'disable'" in options and "'connect_timeout': 5" in options
    assert "'application_name': 'shop shell node 3'" in options


def test_a_test_runner_in_the_environment_weakens_nothing():
    """PYTEST_VERSION (what pytest sets, and any process it starts inherits) is not
    a reason to relax anything: only the settings module the suite names is."""
    show = "from django.conf import settings as s; print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.REDIS_URL)"
    result = _start_django("shell", "-c", show, PYTEST_VERSION="8.3.0", DJANGO_SETTINGS_MODULE="config.settings")
    assert result.returncode != 0 and "DEBUG is off and SECRET_KEY is not set" in result.stderr
    result = _start_django(
        "shell",
        "-c",
        show,
        PYTEST_VERSION="8.3.0",
        DJANGO_SETTINGS_MODULE="config.settings",
        SECRET_KEY=STRONG_KEY,
        PAYMENT_WEBHOOK_SECRET=STRONG_WEBHOOK_SECRET,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-3:] == ["True", "31536000", "redis://127.0.0.1:6379/0"]
    assert os.environ["DJANGO_SETTINGS_MODULE"] == "config.test_settings"  # how this suite chose its settings


def test_production_serves_no_api_docs_unless_asked():
    show = (
        "from django.urls import Resolver404, resolve\n"
        "from rest_framework.settings import api_settings\n"
        "def served(path):\n"
        "    try:\n"
        "        return resolve(path).url_name\n"
        "    except Resolver404:\n"
        "        return 'none'\n"
        "print(served('/api/docs/'), served('/api/schema/'), len(api_settings.DEFAULT_RENDERER_CLASSES))"
    )
    secrets_ = {"SECRET_KEY": STRONG_KEY, "PAYMENT_WEBHOOK_SECRET": STRONG_WEBHOOK_SECRET}
    result = _start_django("shell", "-c", show, **secrets_)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-3:] == ["None", "None", "1"]  # the API's JSON 404; JSON only, no browsable API
    result = _start_django("shell", "-c", show, API_DOCS="1", **secrets_)
    assert result.stdout.split()[-3:] == ["docs", "schema", "2"]


def test_process_refuses_to_start_with_debug_off_on_dev_secret():
    result = _start_django(DEBUG="0", SECRET_KEY=DEV_SECRET_KEY, PAYMENT_WEBHOOK_SECRET=STRONG_WEBHOOK_SECRET)
    assert result.returncode != 0
    assert "SECRET_KEY is a value committed to this repository" in result.stderr


@pytest.mark.parametrize("name", ["WEB_WORKERS", "WEB_THREADS"])
def test_gunicorn_stops_on_a_setting_that_is_not_an_integer_and_names_it(name):
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--check-config", "--config", "python:config.gunicorn", "config.wsgi"],
        env={**os.environ, name: "two"},
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        timeout=60,
    )
    assert result.returncode != 0
    assert f"{name} must be an integer, got 'two'" in result.stderr, result.stderr


def test_a_process_stops_on_a_metrics_port_that_is_not_an_integer_and_names_it():
    result = _start_django(DEBUG="1", METRICS_PORT="91o1")
    assert result.returncode != 0
    assert "METRICS_PORT must be an integer, got '91o1'" in result.stderr


def test_make_run_turns_debug_on():
    result = subprocess.run(
        ["make", "-n", "run"], capture_output=True, text=True, cwd=settings.BASE_DIR, env={**os.environ, "DEBUG": ""}
    )
    assert result.returncode == 0, result.stderr
    assert "DEBUG ?= 1" in (settings.BASE_DIR / "Makefile").read_text()


@pytest.mark.slow
def test_the_deploy_check_is_clean_with_production_settings():
    result = _start_django(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        SECRET_KEY=STRONG_KEY,
        PAYMENT_WEBHOOK_SECRET=STRONG_WEBHOOK_SECRET,
        ALLOWED_HOSTS="shop.example.com",
        CSRF_TRUSTED_ORIGINS="https://shop.example.com",
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_a_process_stops_on_a_number_setting_that_is_not_a_number_and_names_it():
    result = _start_django(DEBUG="1", OUTBOX_POLL_INTERVAL_SECONDS="0,1")
    assert result.returncode != 0
    assert "OUTBOX_POLL_INTERVAL_SECONDS must be a number, got '0,1'" in result.stderr
