"""shop/admin.py: the admin's password change goes through the service, so it
ends every API session of the user at once, as the API's does."""

import pytest
from knox.models import AuthToken

from tests.factories import api_token
from tests.helpers import client_with, staff_client

pytestmark = pytest.mark.django_db


def test_user_admin_password_change_revokes_the_users_tokens(user, django_capture_on_commit_callbacks):
    client = client_with(api_token(user))
    assert client.get("/api/cart").status_code == 200  # cached in this process and in Redis
    admin = staff_client(superuser=True)
    body = {"usable_password": "true", "password1": "a-brand-new-passphrase", "password2": "a-brand-new-passphrase"}
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(f"/admin/auth/user/{user.pk}/password/", body)
    assert response.status_code == 302, response.content
    assert client.get("/api/cart").status_code == 401
    assert not AuthToken.objects.filter(user=user).exists()
    user.refresh_from_db()
    assert user.check_password("a-brand-new-passphrase")


def test_user_admin_disabling_password_login_revokes_the_users_tokens(user, django_capture_on_commit_callbacks):
    client = client_with(api_token(user))
    admin = staff_client(superuser=True)
    body = {"usable_password": "false", "unset-password": "1"}  # the "Disable password-based authentication" button
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(f"/admin/auth/user/{user.pk}/password/", body)
    assert response.status_code == 302, response.content
    assert client.get("/api/cart").status_code == 401
    user.refresh_from_db()
    assert not user.has_usable_password()


def test_user_admin_refuses_a_weak_password_and_keeps_the_tokens(user):
    client = client_with(api_token(user))
    admin = staff_client(superuser=True)
    response = admin.post(f"/admin/auth/user/{user.pk}/password/", {"password1": "123", "password2": "123"})
    assert response.status_code == 200  # the form again, with its errors
    assert client.get("/api/cart").status_code == 200 and AuthToken.objects.filter(user=user).exists()
