import pytest
from rest_framework.authtoken.models import Token

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
    assert not Token.objects.exists()


def test_token_for_good_credentials(api_client, user):
    response = api_client.post(
        "/api/auth/token", {"username": user.username, "password": "correct-horse-battery"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["token"] == Token.objects.get(user=user).key


def test_token_for_bad_credentials_is_401(api_client, user):
    response = api_client.post(
        "/api/auth/token", {"username": user.username, "password": "wrong"}, format="json"
    )
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
    }
