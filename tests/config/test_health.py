"""config/health.py: /healthz, and /readyz naming what is down, from one probe at a time."""

import pytest

from config import health


def test_healthz_answers_without_services(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.kafka
def test_readyz_200_when_every_service_answers(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    services = response.json()["services"]
    assert {name: s["status"] for name, s in services.items()} == {
        "postgres": "up",
        "redis": "up",
        "kafka": "up",
    }


def test_readyz_503_names_kafka_when_it_is_down(client, db, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # nothing listens there
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["down"] == ["kafka"]
    assert response.json()["services"]["postgres"]["status"] == "up"


def test_readyz_503_names_redis_when_it_is_down(client, db, settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
        }
    }
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert set(response.json()["down"]) == {"redis", "kafka"}


def test_api_docs_and_schema_render(client, db):
    assert client.get("/api/docs/").status_code == 200
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/auth/register" in schema.content


def test_readyz_names_what_is_down_without_its_error_text(client, db, settings):
    settings.KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"
    body = client.get("/readyz").json()
    assert body["down"] == ["kafka"]
    assert body["services"]["kafka"] == {"status": "down", "reason": "KafkaException"}


def test_readyz_answers_a_flood_from_one_probe(client, db, monkeypatch):
    calls = []
    monkeypatch.setattr(health, "CHECKS", {"postgres": lambda timeout: calls.append(timeout)})
    for _ in range(50):
        assert client.get("/readyz").status_code == 200
    assert len(calls) == 1
    health.forget_last_probe()
    client.get("/readyz")
    assert len(calls) == 2
