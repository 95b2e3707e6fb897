"""shop/apis.py: registering, logging in (one token a session, capped per user), me and logging out."""

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken

from core.authentication import token_digest
from tests.factories import api_token
from tests.helpers import client_with, stop_redis_for_this_process

pytestmark = pytest.mark.django_db


def test_register_returns_a_working_token(api_client):
    response = api_client.post(
        "/api/auth/register",
        {"username": "ada", "password": "analytical-engine-1843", "email": "ada@example.com"},
        format="json",
    )
    assert response.status_code == 201
    token = response.json()["token"]
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    me = api_client.get("/api/auth/me")
    assert me.status_code == 200
    assert me.json()["username"] == "ada"
    assert me.json()["email"] == "ada@example.com"


def test_register_duplicate_username_is_409(api_client, user):
    response = api_client.post(
        "/api/auth/register", {"username": user.username, "password": "analytical-engine-1843"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "username_taken"


@pytest.mark.parametrize(
    "body",
    [
        {"username": "bob", "password": "123"},  # too short, numeric
        {"username": "bob", "password": "password"},  # common
        {"username": "bob bob", "password": "analytical-engine-1843"},  # invalid username
        {"username": "bob", "password": "analytical-engine-1843", "email": "not-an-email"},
        {"username": "bob"},
        {},
    ],
)
def test_register_weak_or_invalid_input_is_400_and_creates_nothing(api_client, body):
    response = api_client.post("/api/auth/register", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert not AuthToken.objects.exists()


def test_token_for_good_credentials(api_client, user):
    response = api_client.post(
        "/api/auth/token", {"username": user.username, "password": "correct-horse-battery"}, format="json"
    )
    assert response.status_code == 200
    token = response.json()["token"]
    [stored] = AuthToken.objects.filter(user=user)
    assert stored.digest == token_digest(token) and token not in (stored.digest, stored.token_key)  # hashed at rest
    assert stored.expiry > timezone.now() + timedelta(days=29)
    assert response.json()["expiry"].startswith(stored.expiry.isoformat()[:19])


def test_token_for_bad_credentials_is_401(api_client, user):
    response = api_client.post("/api/auth/token", {"username": user.username, "password": "wrong"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_credentials"


def test_me_requires_authentication(api_client):
    assert api_client.get("/api/auth/me").status_code == 401
    api_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = api_client.get("/api/auth/me")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_me_with_token(auth_client):
    response = auth_client.get("/api/auth/me")
    assert response.status_code == 200
    assert response.json() == {
        "id": auth_client.user.id,
        "username": auth_client.user.username,
        "email": auth_client.user.email,
        "email_verified": False,
        "pending_email": "",
    }


def test_every_login_is_a_session_of_its_own_and_logout_ends_one(api_client, user):
    def login():
        body = {"username": user.username, "password": "correct-horse-battery"}
        return api_client.post("/api/auth/token", body, format="json").json()["token"]

    phone, laptop = client_with(login()), client_with(login())
    assert phone.post("/api/auth/logout").status_code == 204
    assert phone.get("/api/cart").status_code == 401
    assert phone.get("/api/auth/me").status_code == 401
    assert laptop.get("/api/cart").status_code == 200


def test_tokens_per_user_are_capped(api_client, user, settings):
    settings.API_TOKENS_PER_USER = 2
    body = {"username": user.username, "password": "correct-horse-battery"}
    tokens = [api_client.post("/api/auth/token", body, format="json").json()["token"] for _ in range(4)]
    assert AuthToken.objects.filter(user=user).count() == 2
    assert client_with(tokens[0]).get("/api/auth/me").status_code == 401
    assert client_with(tokens[3]).get("/api/auth/me").status_code == 200


def test_logout_with_redis_down_fails_closed(user, settings):
    """The revocation cannot reach Redis: it fails (503) and the token stays valid in the
    database too, rather than being deleted there while caches still accept it."""
    token = api_token(user)
    client = client_with(token)
    assert client.get("/api/cart").status_code == 200
    stop_redis_for_this_process(settings)
    response = client.post("/api/auth/logout")
    assert response.status_code == 503 and response.json()["error"]["code"] == "cache_unavailable"
    assert AuthToken.objects.filter(digest=token_digest(token)).exists()
