"""shop/accounts.py and shop/account_apis.py: password reset (no enumeration,
single-use links, rate limits), e-mail verification, e-mail change, and the
checkout's helper."""

import logging
import re
import statistics
import time
from datetime import datetime, timedelta
from smtplib import SMTPServerDisconnected
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from knox.models import AuthToken
from rest_framework.test import APIClient

from core.authentication import token_digest
from shop.accounts import email_verified, require_verified_email
from shop.exceptions import EmailNotVerified
from shop.models import Account
from tests.factories import PASSWORD, UserFactory, api_token
from tests.helpers import client_with, run_in_threads, shopper_client

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a-brand-new-passphrase"


def link_in(message, path: str) -> dict:
    """uid and token of the `path` link in an e-mail (it points at SHOP_PUBLIC_URL)."""
    [url] = re.findall(rf"\S+/{path}\?\S+", message.body)
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == "http://shop.example"
    return {name: values[0] for name, values in parse_qs(parts.query).items()}


@pytest.fixture(autouse=True)
def public_url(settings):
    settings.SHOP_PUBLIC_URL = "http://shop.example/"


def ask_reset(client, email: str, **headers):
    return client.post("/api/auth/password-reset", {"email": email}, format="json", **headers)


def confirm(client, link: dict, password: str = NEW_PASSWORD):
    return client.post("/api/auth/password-reset/confirm", {**link, "new_password": password}, format="json")


def tampered(token: str) -> str:
    """The token with its last hex digit changed (always to another one: a fixed digit is the same 1 time in 16)."""
    return token[:-1] + ("1" if token[-1] == "0" else "0")


def me(client) -> dict:
    response = client.get("/api/auth/me")
    assert response.status_code == 200, response.content
    return response.json()


# --- password reset ------------------------------------------------------------------------------------------


def test_password_reset_end_to_end(api_client, user):
    phone, laptop = client_with(api_token(user)), client_with(api_token(user))
    assert me(phone)["id"] == user.id

    asked = ask_reset(api_client, user.email.upper())
    assert asked.status_code == 202
    [message] = mail.outbox
    assert message.to == [user.email] and message.subject == "Reset your password"
    link = link_in(message, "reset-password")
    assert link["uid"] == urlsafe_base64_encode(force_bytes(user.pk))

    assert confirm(api_client, link).status_code == 204
    for client in (phone, laptop):
        assert client.get("/api/auth/me").status_code == 401
    assert not AuthToken.objects.filter(user=user).exists()
    login = {"username": user.username, "password": NEW_PASSWORD}
    assert api_client.post("/api/auth/token", login, format="json").status_code == 200

    again = confirm(api_client, link, password="yet-another-passphrase")
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_token"
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)


def test_password_reset_weak_password_is_400_on_the_field_and_the_link_still_works(api_client, user):
    ask_reset(api_client, user.email)
    link = link_in(mail.outbox[0], "reset-password")
    weak = confirm(api_client, link, password="123")
    assert weak.status_code == 400
    assert weak.json()["error"]["code"] == "invalid" and "new_password" in weak.json()["error"]["details"]
    assert confirm(api_client, link).status_code == 204


def test_password_reset_link_expires_after_the_timeout(api_client, user, settings, monkeypatch):
    settings.PASSWORD_RESET_TIMEOUT = 600
    asked_at = datetime(2030, 1, 15, 3, 0, 0)  # any moment: the tokens read this clock only
    clock = {"now": asked_at}
    monkeypatch.setattr(PasswordResetTokenGenerator, "_now", lambda self: clock["now"])
    ask_reset(api_client, user.email)
    link = link_in(mail.outbox[0], "reset-password")

    clock["now"] = asked_at + timedelta(seconds=601)
    late = confirm(api_client, link)
    assert late.status_code == 400 and late.json()["error"]["code"] == "invalid_token"
    clock["now"] = asked_at + timedelta(seconds=599)
    assert confirm(api_client, link).status_code == 204


@pytest.mark.parametrize(
    "link",
    [
        {"uid": "not base64 at all", "token": "abc-def"},
        {"uid": urlsafe_base64_encode(b"not-a-number"), "token": "abc-def"},
        {"uid": urlsafe_base64_encode(b"99999999999999999999999999"), "token": "abc-def"},
        {"uid": urlsafe_base64_encode(b"-1"), "token": "abc-def"},
        {"uid": "", "token": ""},
    ],
)
def test_password_reset_confirm_refuses_made_up_links(api_client, user, link):
    response = confirm(api_client, link)
    assert response.status_code == 400
    assert response.json()["error"]["code"] in ("invalid_token", "invalid")


def test_password_reset_token_of_one_user_does_not_open_another(api_client, user):
    other = UserFactory()
    ask_reset(api_client, user.email)
    link = link_in(mail.outbox[0], "reset-password")
    stolen = {"uid": urlsafe_base64_encode(force_bytes(other.pk)), "token": link["token"]}
    assert confirm(api_client, stolen).json()["error"]["code"] == "invalid_token"
    assert confirm(api_client, {"uid": link["uid"], "token": tampered(link["token"])}).status_code == 400


def test_password_reset_goes_to_every_active_account_of_the_address_and_no_other(api_client):
    shared = "family@example.com"
    first, second = UserFactory(email=shared), UserFactory(email="Family@Example.com")
    UserFactory(email=shared, is_active=False)
    erased = UserFactory(email=shared)
    Account.objects.create(customer=erased, erased_at=timezone.now())
    passwordless = UserFactory(email=shared)
    passwordless.set_unusable_password()
    passwordless.save()
    UserFactory(email="family@example.com.evil")

    assert ask_reset(api_client, shared).status_code == 202
    assert sorted(m.to[0] for m in mail.outbox) == sorted([first.email, second.email])
    uids = {link_in(m, "reset-password")["uid"] for m in mail.outbox}
    assert uids == {urlsafe_base64_encode(force_bytes(u.pk)) for u in (first, second)}


def test_password_reset_refused_for_an_account_erased_after_the_link(api_client, user):
    ask_reset(api_client, user.email)
    link = link_in(mail.outbox[0], "reset-password")
    Account.objects.create(customer=user, erased_at=timezone.now())
    assert confirm(api_client, link).json()["error"]["code"] == "invalid_token"


@pytest.mark.django_db(transaction=True)
def test_password_reset_link_followed_twice_at_once_works_once():
    user = UserFactory()
    ask_reset(APIClient(), user.email)
    link = link_in(mail.outbox[0], "reset-password")
    passwords = (NEW_PASSWORD, "another-passphrase")
    statuses = run_in_threads([lambda p=p: confirm(APIClient(), link, p).status_code for p in passwords])
    assert sorted(statuses) == [204, 400]


# --- no enumeration ------------------------------------------------------------------------------------------


def test_password_reset_answer_is_the_same_for_known_and_unknown_addresses(api_client, user):
    known, unknown = ask_reset(api_client, user.email), ask_reset(api_client, "nobody@example.com")
    assert (known.status_code, known.json()) == (unknown.status_code, unknown.json())
    assert known.status_code == 202
    assert set(known.headers) == set(unknown.headers)
    assert len(mail.outbox) == 1


def test_password_reset_same_statements_and_time_for_known_and_unknown_addresses(api_client, user, caplog):
    """The same SQL statements, and the same time within a generous factor. Timed
    twice: as the client waits for the call (the e-mail included: the test client,
    like a WSGI server, closes the response after reading it, which sends it), and
    as the server answers (the access log's duration, up to the answer)."""
    timings = {"known": [], "unknown": []}

    def timed(kind: str, email: str) -> None:
        started = time.perf_counter()
        response = ask_reset(api_client, email)
        timings[kind].append(time.perf_counter() - started)
        assert response.status_code == 202

    with CaptureQueriesContext(connection) as known_queries:
        ask_reset(api_client, user.email)
    with CaptureQueriesContext(connection) as unknown_queries:
        ask_reset(api_client, "nobody@example.com")
    assert len(known_queries) == len(unknown_queries) == 1
    assert [q["sql"] for q in known_queries] == [
        q["sql"].replace("nobody@example.com", user.email) for q in unknown_queries
    ]

    for _ in range(5):  # both paths warm
        timed("known", user.email), timed("unknown", "nobody@example.com")
    timings = {"known": [], "unknown": []}
    with caplog.at_level(logging.INFO, logger="shop.access"):
        for i in range(50):  # interleaved: a slower moment of the machine weighs on both
            timed("known", user.email)
            timed("unknown", f"nobody{i}@example.com")
    answered = [r.duration_ms for r in caplog.records if r.name == "shop.access"]
    client = {kind: statistics.median(times) * 1000 for kind, times in timings.items()}
    server = {"known": statistics.median(answered[0::2]), "unknown": statistics.median(answered[1::2])}
    print(f"\npassword reset, medians of 50 (ms): as the client waits {client}, as the server answers {server}")
    for medians in (client, server):
        assert max(medians.values()) / min(medians.values()) < 2
    assert len(mail.outbox) == 1 + 5 + 50


# --- rate limits ---------------------------------------------------------------------------------------------


def test_password_reset_limited_per_email_whatever_its_case(api_client, user, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "password_reset": "2/hour"}
    for email in (user.email, user.email.upper()):
        assert ask_reset(api_client, email, REMOTE_ADDR="10.0.0.1").status_code == 202
    refused = ask_reset(api_client, user.email.title(), REMOTE_ADDR="10.0.0.2")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited" and int(refused["Retry-After"]) > 0
    unknown = [ask_reset(api_client, "nobody@example.com").status_code for _ in range(3)]
    assert unknown == [202, 202, 429]  # an unknown address is counted alike
    assert ask_reset(api_client, "someone.else@example.com").status_code == 202
    assert len(mail.outbox) == 2


def test_password_reset_limited_per_client_address(api_client, user, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "password_reset_address": "2/hour"}
    for i in range(2):
        assert ask_reset(api_client, f"a{i}@example.com", REMOTE_ADDR="10.0.0.1").status_code == 202
    # X-Forwarded-For is the client's own word without TRUSTED_PROXIES: the peer is counted.
    refused = ask_reset(api_client, user.email, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="10.9.9.9")
    assert refused.status_code == 429 and refused["Retry-After"]
    assert refused.json()["error"]["code"] == "rate_limited"
    assert mail.outbox == []
    assert ask_reset(api_client, user.email, REMOTE_ADDR="10.0.0.2").status_code == 202


def test_password_reset_bad_input_is_400(api_client):
    for body in ({}, {"email": "not-an-email"}, {"email": ["a@example.com"]}, {"email": "x" * 300 + "@example.com"}):
        response = api_client.post("/api/auth/password-reset", body, format="json")
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"


# --- e-mails and their log -----------------------------------------------------------------------------------


def test_account_emails_are_logged_without_their_link(api_client, user, caplog):
    with caplog.at_level(logging.INFO, logger="shop.accounts"):
        ask_reset(api_client, user.email)
    token = link_in(mail.outbox[0], "reset-password")["token"]
    [record] = [r for r in caplog.records if r.name == "shop.accounts"]
    assert record.levelno == logging.INFO and record.email_kind == "password_reset" and record.recipient == user.email
    assert token not in caplog.text


def test_a_mail_server_down_is_logged_and_the_answer_is_the_same(api_client, user, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise SMTPServerDisconnected("gone")

    monkeypatch.setattr("shop.accounts.send_mail", refuse)
    with caplog.at_level(logging.INFO, logger="shop.accounts"):
        assert ask_reset(api_client, user.email).status_code == 202
    assert "account e-mail not sent: password_reset" in caplog.text


# --- e-mail verification -------------------------------------------------------------------------------------


def register(client, **body):
    body = {"username": "ada", "password": "analytical-engine-1843", **body}
    return client.post("/api/auth/register", body, format="json")


def verify(client, link: dict):
    return client.post("/api/auth/verify-email", link, format="json")


def test_registration_sends_a_verification_link_and_following_it_verifies(
    api_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        registered = register(api_client, email="ada@example.com")
    assert registered.status_code == 201
    [message] = mail.outbox
    assert message.to == ["ada@example.com"] and message.subject == "Confirm your e-mail address"
    shopper = client_with(registered.json()["token"])
    assert me(shopper) | {"id": 0} == {
        "id": 0,
        "username": "ada",
        "email": "ada@example.com",
        "email_verified": False,
        "pending_email": "",
    }

    link = link_in(message, "verify-email")
    assert verify(api_client, link).status_code == 204
    assert me(shopper)["email_verified"] is True
    account = Account.objects.get(customer__username="ada")
    assert account.verified_email == "ada@example.com" and account.email_verified_at is not None

    again = verify(api_client, link)
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_token"


def test_verification_drops_the_cached_tokens_that_remember_it_unverified(
    user, redis, django_capture_on_commit_callbacks
):
    """The token caches keep whether the e-mail is verified (shop/established.py):
    following a link makes them forget the shopper's tokens."""
    shopper = shopper_client(user)
    assert shopper.get("/api/cart").status_code == 200  # the token cached in Redis
    digest = token_digest(shopper._credentials["HTTP_AUTHORIZATION"].split()[1])
    assert redis.exists(f"auth:token:{digest}")
    shopper.post("/api/auth/verify-email/resend")
    with django_capture_on_commit_callbacks(execute=True):
        assert verify(APIClient(), link_in(mail.outbox[0], "verify-email")).status_code == 204
    assert not redis.exists(f"auth:token:{digest}")
    assert shopper.get("/api/cart").status_code == 200


def test_registration_without_an_email_sends_nothing(api_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert register(api_client).status_code == 201
    assert mail.outbox == []


def test_registration_refused_sends_nothing(api_client, user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert register(api_client, username=user.username, email="x@example.com").status_code == 409
    assert mail.outbox == []


def test_verification_link_refused_when_made_up_or_for_an_inactive_user(api_client, user):
    shopper = shopper_client(user)
    shopper.post("/api/auth/verify-email/resend")
    link = link_in(mail.outbox[0], "verify-email")
    assert verify(api_client, {**link, "token": tampered(link["token"])}).status_code == 400
    assert verify(api_client, {"uid": "@@@", "token": link["token"]}).status_code == 400
    user.is_active = False
    user.save()
    assert verify(api_client, link).json()["error"]["code"] == "invalid_token"


def test_a_reset_token_is_no_verification_token_and_back(api_client, user):
    ask_reset(api_client, user.email)
    reset = link_in(mail.outbox[0], "reset-password")
    assert verify(api_client, reset).json()["error"]["code"] == "invalid_token"
    shopper_client(user).post("/api/auth/verify-email/resend")
    verification = link_in(mail.outbox[1], "verify-email")
    assert confirm(api_client, verification).json()["error"]["code"] == "invalid_token"


def test_resend_sends_a_new_link_limited_per_account(user, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "verify_email": "2/hour"}
    shopper = shopper_client(user)
    sent = shopper.post("/api/auth/verify-email/resend")
    assert sent.status_code == 202 and sent.json() == {"sent_to": user.email}
    assert shopper.post("/api/auth/verify-email/resend").status_code == 202
    refused = shopper.post("/api/auth/verify-email/resend")
    assert refused.status_code == 429 and refused["Retry-After"]
    assert shopper_client().post("/api/auth/verify-email/resend").status_code == 202  # another account's own count
    assert len(mail.outbox) == 3
    assert verify(APIClient(), link_in(mail.outbox[1], "verify-email")).status_code == 204


def test_resend_with_nothing_to_verify_is_409(user):
    shopper = shopper_client(user)
    shopper.post("/api/auth/verify-email/resend")
    assert verify(APIClient(), link_in(mail.outbox[0], "verify-email")).status_code == 204
    verified = shopper.post("/api/auth/verify-email/resend")
    assert verified.status_code == 409 and verified.json()["error"]["code"] == "nothing_to_verify"
    no_email = shopper_client(UserFactory(email=""))
    assert no_email.post("/api/auth/verify-email/resend").json()["error"]["code"] == "nothing_to_verify"
    assert APIClient().post("/api/auth/verify-email/resend").status_code == 401


# --- e-mail change -------------------------------------------------------------------------------------------


def change_email(client, email: str, password: str = PASSWORD):
    return client.put("/api/auth/me/email", {"email": email, "password": password}, format="json")


def test_email_change_keeps_the_old_address_until_the_new_one_is_verified(
    user, redis, django_capture_on_commit_callbacks
):
    shopper = shopper_client(user)
    old = user.email
    wrong = change_email(shopper, "new@example.com", password="not-it")
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "wrong_password"
    assert mail.outbox == []

    with django_capture_on_commit_callbacks(execute=True):
        changed = change_email(shopper, "new@example.com")
    assert changed.status_code == 202 and changed.json() == {"email": old, "pending_email": "new@example.com"}
    [message] = mail.outbox
    assert message.to == ["new@example.com"]
    assert me(shopper) | {"id": 0} == {
        "id": 0,
        "username": user.username,
        "email": old,
        "email_verified": False,
        "pending_email": "new@example.com",
    }
    user.refresh_from_db()
    assert user.email == old

    assert shopper.get("/api/cart").status_code == 200  # the token cached in Redis, with the old e-mail
    digest = token_digest(shopper._credentials["HTTP_AUTHORIZATION"].split()[1])
    assert redis.exists(f"auth:token:{digest}")
    with django_capture_on_commit_callbacks(execute=True):
        assert verify(APIClient(), link_in(message, "verify-email")).status_code == 204
    assert not redis.exists(f"auth:token:{digest}")  # no cache keeps the old e-mail
    state = me(shopper)
    assert (state["email"], state["email_verified"], state["pending_email"]) == ("new@example.com", True, "")
    assert email_verified(customer_id=user.pk)


def test_email_change_back_to_the_current_address_drops_the_pending_one(user, django_capture_on_commit_callbacks):
    shopper = shopper_client(user)
    with django_capture_on_commit_callbacks(execute=True):
        change_email(shopper, "new@example.com")
        back = change_email(shopper, user.email)
    assert back.json() == {"email": user.email, "pending_email": ""}
    assert [m.to for m in mail.outbox] == [["new@example.com"], [user.email]]  # the current one is not verified
    assert verify(APIClient(), link_in(mail.outbox[0], "verify-email")).status_code == 400
    assert me(shopper)["pending_email"] == ""


def test_email_change_limited_per_account(user, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "verify_email": "1/hour"}
    shopper = shopper_client(user)
    assert change_email(shopper, "one@example.com").status_code == 202
    refused = change_email(shopper, "two@example.com")
    assert refused.status_code == 429
    assert me(shopper)["pending_email"] == "one@example.com"


def test_email_change_bad_input_is_400_and_needs_a_token(user, api_client):
    shopper = shopper_client(user)
    for body in ({"email": "nope", "password": PASSWORD}, {"email": "a@example.com"}, {}):
        response = shopper.put("/api/auth/me/email", body, format="json")
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"
    assert api_client.put("/api/auth/me/email", {"email": "a@example.com", "password": PASSWORD}).status_code == 401


def test_verification_link_dies_when_the_address_changes(user, django_capture_on_commit_callbacks):
    shopper, anyone = shopper_client(user), APIClient()
    with django_capture_on_commit_callbacks(execute=True):
        shopper.post("/api/auth/verify-email/resend")  # for the current address, A
        change_email(shopper, "b@example.com")
        change_email(shopper, "c@example.com")
    for_a, for_b, for_c = (link_in(m, "verify-email") for m in mail.outbox)

    assert verify(anyone, for_b).json()["error"]["code"] == "invalid_token"  # B is no longer asked for
    assert verify(anyone, for_a).status_code == 204  # A is still the e-mail: its link works, C stays pending
    assert me(shopper)["pending_email"] == "c@example.com"
    assert verify(anyone, for_c).status_code == 204  # following A's link did not kill C's
    assert verify(anyone, for_a).status_code == 400  # A is not the e-mail any more
    assert me(shopper)["email"] == "c@example.com" and me(shopper)["email_verified"]


def test_reset_link_dies_when_the_email_changes(api_client, user, django_capture_on_commit_callbacks):
    ask_reset(api_client, user.email)
    reset = link_in(mail.outbox[0], "reset-password")
    with django_capture_on_commit_callbacks(execute=True):
        change_email(shopper_client(user), "new@example.com")
    assert verify(api_client, link_in(mail.outbox[1], "verify-email")).status_code == 204
    assert confirm(api_client, reset).json()["error"]["code"] == "invalid_token"


# --- checkout's helper ---------------------------------------------------------------------------------------


def test_email_verified_only_while_the_verified_address_is_the_email(user):
    assert not email_verified(customer_id=user.pk)  # no account row
    Account.objects.create(customer=user, verified_email=user.email, email_verified_at=timezone.now())
    assert email_verified(customer_id=user.pk)
    user.email = "changed.by.staff@example.com"
    user.save()
    assert not email_verified(customer_id=user.pk)
    Account.objects.filter(customer=user).update(verified_email=user.email, erased_at=timezone.now())
    assert not email_verified(customer_id=user.pk)  # erased


def test_require_verified_email_refuses_with_403_only_when_the_setting_asks(user, settings, django_assert_num_queries):
    settings.REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT = False
    with django_assert_num_queries(0):
        require_verified_email(customer_id=user.pk)
    settings.REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT = True
    with pytest.raises(EmailNotVerified) as refused:
        require_verified_email(customer_id=user.pk)
    assert (refused.value.status, refused.value.code) == (403, "email_not_verified")
    Account.objects.create(customer=user, verified_email=user.email, email_verified_at=timezone.now())
    with django_assert_num_queries(1):
        require_verified_email(customer_id=user.pk)


def test_me_costs_one_query_more_than_authentication(user, django_assert_num_queries):
    shopper = shopper_client(user)
    with django_assert_num_queries(3):  # the token, its user (knox), the account
        me(shopper)


def test_checkout_refuses_an_unverified_email_only_when_the_shop_requires_it(redis, settings):
    """REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT: 403 email_not_verified before anything is
    written; once the e-mail is verified, the same checkout goes through."""
    from orders.models import Order
    from shop.models import Account
    from tests.factories import product_with_stock
    from tests.helpers import checkout, fill_cart, shopper_client

    product_with_stock(sku="V", price=1000, available=5)
    client = shopper_client()
    fill_cart(redis, client.user.id, {"V": 1})
    settings.REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT = True
    refused = checkout(client, "k-verified")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "email_not_verified")
    assert not Order.objects.exists()
    Account.objects.create(
        customer=client.user, verified_email=client.user.email, email_verified_at=client.user.date_joined
    )
    assert checkout(client, "k-verified").status_code == 201
