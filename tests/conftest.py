import uuid

import pytest
from django.conf import settings
from django_redis import get_redis_connection
from rest_framework.test import APIClient

from core.hotcache import hot_cache
from tests.factories import UserFactory, api_token


@pytest.fixture(autouse=True)
def redis():
    """The tests' own Redis database (settings.TESTING), empty for every test."""
    assert not settings.REDIS_URL.endswith(("/0", "/1")), "tests must not touch the development Redis databases"
    conn = get_redis_connection("default")
    conn.flushdb()
    hot_cache.clear()  # its generation lived in the Redis just flushed
    yield conn
    conn.flushdb()
    hot_cache.clear()


@pytest.fixture(autouse=True)
def fresh_probes():
    """/readyz and /metrics keep their last answer a few seconds: not from one test to the next."""
    from config.health import forget_last_probe
    from config.metrics import LiveStateCollector

    forget_last_probe()
    LiveStateCollector._cached = None


@pytest.fixture(autouse=True)
def generous_rate_limits(settings):
    """Rate limits out of the way; tests of the limits set their own."""
    settings.RATE_LIMITS = {"checkout": "100000/min", "cart_write": "100000/min", "auth": "100000/min"}


@pytest.fixture
def api_client():
    return APIClient()


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def auth_client(user):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    client.user = user
    return client


@pytest.fixture(scope="session")
def run_id():
    """Unique per test run, for Kafka topic names that must not collide."""
    return uuid.uuid4().hex[:10]
