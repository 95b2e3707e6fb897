"""A voucher code in the cart: PUT/DELETE /api/cart/voucher for shoppers and
guests, each refusal with its own 422, the code kept with the cart in Redis
(merged at login, not a line), the cart priced with it, and guessing limited
per shopper and per client address."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from cart.storage import VOUCHER_FIELD, cart_key
from shop.models import Promotion
from tests.factories import PromotionFactory, UserFactory, VoucherFactory, api_token, product_with_stock
from tests.helpers import redis_commands, shopper_client

pytestmark = pytest.mark.django_db


def put_line(client, sku, quantity, token=None):
    headers = {"HTTP_CART_TOKEN": token} if token else {}
    return client.put(f"/api/cart/items/{sku}", {"quantity": quantity}, format="json", **headers)


def enter(client, code, token=None, **headers):
    if token:
        headers["HTTP_CART_TOKEN"] = token
    return client.put("/api/cart/voucher", {"code": code}, format="json", **headers)


@pytest.fixture
def mug():
    return product_with_stock(sku="MUG", price=1000, available=50)


def test_a_voucher_entered_prices_the_cart_and_stays_with_it(mug, redis, monkeypatch, django_assert_num_queries):
    VoucherFactory(code="SPRING-10", value=10)
    shopper = shopper_client()
    put_line(shopper, "MUG", 2)

    entered = enter(shopper, "spring-10")  # codes are case-insensitive

    assert entered.status_code == 200, entered.content
    body = entered.json()
    assert body["voucher"] == {"code": "SPRING-10", "error": None}
    assert (body["subtotal"], body["total"]) == (2000, 1800)
    assert [(d["code"], d["amount"]) for d in body["discounts"]] == [("SPRING-10", 200)]
    assert redis.hget(cart_key(shopper.user.id), VOUCHER_FIELD) == b"SPRING-10"
    sent = redis_commands(redis, monkeypatch)
    with django_assert_num_queries(0):  # a warm read: the voucher's rule from process memory
        assert shopper.get("/api/cart").json() == body
    assert sent == ["EVALSHA"]


def _hours(n: int):
    return timezone.now() + timedelta(hours=n)


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda: None, "voucher_unknown"),
        (lambda: VoucherFactory(code="TRY", starts_at=_hours(-2), ends_at=_hours(-1)), "voucher_expired"),
        (lambda: VoucherFactory(code="TRY", starts_at=_hours(1)), "voucher_not_started"),
        (lambda: VoucherFactory(code="TRY", usage_limit=1, uses=1), "voucher_used_up"),
        (lambda: VoucherFactory(code="TRY", min_subtotal=5000), "voucher_not_applicable"),
        (lambda: VoucherFactory(code="TRY", scope=Promotion.Scope.SKUS, products=["TEE"]), "voucher_not_applicable"),
    ],
)
def test_each_refusal_is_a_422_with_its_code_and_the_cart_keeps_its_voucher(mug, make, code):
    product_with_stock(sku="TEE", price=500)
    make()
    VoucherFactory(code="KEPT")
    shopper = shopper_client()
    put_line(shopper, "MUG", 2)
    assert enter(shopper, "KEPT").status_code == 200

    refused = enter(shopper, "TRY")

    assert refused.status_code == 422, refused.content
    assert refused.json()["error"]["code"] == code
    assert shopper.get("/api/cart").json()["voucher"] == {"code": "KEPT", "error": None}


def test_a_code_that_cannot_be_one_is_unknown_without_a_query(mug, django_assert_num_queries):
    shopper = shopper_client()
    shopper.get("/api/cart")  # the token cached
    with django_assert_num_queries(0):
        refused = enter(shopper, "no such code!")
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "voucher_unknown")
    assert enter(shopper, "x" * 65).status_code == 400  # longer than any code: the body is wrong


def test_delete_takes_the_voucher_out(mug):
    VoucherFactory(code="SPRING")
    shopper = shopper_client()
    put_line(shopper, "MUG", 1)
    enter(shopper, "SPRING")
    assert shopper.delete("/api/cart/voucher").status_code == 204
    body = shopper.get("/api/cart").json()
    assert body["voucher"] is None and body["discounts"] == [] and body["total"] == 1000
    assert shopper.delete("/api/cart/voucher").status_code == 204  # none left: still fine


def test_the_cart_says_why_a_voucher_it_holds_no_longer_applies(mug, django_capture_on_commit_callbacks):
    spring = VoucherFactory(code="SPRING", min_subtotal=2000)
    shopper = shopper_client()
    put_line(shopper, "MUG", 2)
    enter(shopper, "SPRING")

    body = put_line(shopper, "MUG", 1).json()  # below the voucher's minimum now
    assert body["voucher"]["error"]["code"] == "voucher_not_applicable"
    assert body["discounts"] == [] and body["total"] == 1000
    with django_capture_on_commit_callbacks(execute=True):
        Promotion.objects.filter(pk=spring.pk).update(min_subtotal=0)
        spring.refresh_from_db()
        spring.ends_at = timezone.now()
        spring.save()  # staff end it: the caches hear of it
    body = shopper.get("/api/cart").json()
    assert body["voucher"]["error"]["code"] == "voucher_expired" and body["total"] == 1000


def test_the_voucher_is_not_a_line(mug, settings):
    settings.CART_MAX_LINES = 2
    product_with_stock(sku="TEE", price=500)
    VoucherFactory(code="SPRING")
    shopper = shopper_client()
    put_line(shopper, "MUG", 1)
    enter(shopper, "SPRING")
    assert put_line(shopper, "TEE", 1).status_code == 200  # two lines and a voucher fit in two lines
    assert [line["sku"] for line in shopper.get("/api/cart").json()["items"]] == ["MUG", "TEE"]


def test_a_cart_with_only_a_voucher_is_empty_at_checkout_and_keeps_it(mug):
    VoucherFactory(code="SPRING")
    shopper = shopper_client()
    put_line(shopper, "MUG", 1)
    enter(shopper, "SPRING")
    put_line(shopper, "MUG", 0)
    refused = shopper.post("/api/orders", HTTP_IDEMPOTENCY_KEY="k1")
    assert refused.json()["error"]["code"] == "cart_empty"
    put_line(shopper, "MUG", 1)
    assert shopper.get("/api/cart").json()["voucher"] == {"code": "SPRING", "error": None}


def test_a_guest_enters_a_voucher_and_it_follows_the_cart_into_the_account(mug, redis):
    VoucherFactory(code="WELCOME", value=20)
    guest = APIClient()
    token = put_line(guest, "MUG", 1)["Cart-Token"]
    assert enter(guest, "WELCOME").status_code == 401  # no Cart-Token: whose cart?
    entered = enter(guest, "welcome", token=token)
    assert entered.status_code == 200 and entered.json()["total"] == 800

    user = UserFactory(username="ann")
    user.set_password("a long passphrase")
    user.save()
    login = APIClient().post(
        "/api/auth/token", {"username": "ann", "password": "a long passphrase"}, format="json", HTTP_CART_TOKEN=token
    )
    assert login.status_code == 200, login.content
    shopper = APIClient()
    shopper.credentials(HTTP_AUTHORIZATION=f"Token {login.json()['token']}")
    cart = shopper.get("/api/cart").json()
    assert cart["voucher"] == {"code": "WELCOME", "error": None} and cart["total"] == 800
    assert redis.hget(cart_key(user.id), VOUCHER_FIELD) == b"WELCOME"


def test_guessing_codes_is_limited_per_shopper(mug, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "voucher": "3/hour", "voucher_address": "100/hour"}
    VoucherFactory(code="REAL")
    shopper = shopper_client()
    put_line(shopper, "MUG", 1)
    answers = [enter(shopper, f"GUESS-{i}").status_code for i in range(3)]
    limited = enter(shopper, "REAL")  # even the right code, once over the limit
    assert answers == [422] * 3
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
    assert limited.json()["error"]["code"] == "rate_limited"
    assert enter(shopper_client(), "REAL").status_code == 422  # another shopper: their own window (empty cart)


def test_guessing_codes_from_many_accounts_is_limited_per_address(mug, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "voucher": "3/hour", "voucher_address": "5/hour"}
    answers = []
    for _ in range(3):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(UserFactory())}")
        answers += [enter(client, f"GUESS-{len(answers)}").status_code for _ in range(2)]
    guest = APIClient()
    token = put_line(guest, "MUG", 1)["Cart-Token"]
    answers.append(enter(guest, "GUESS-G", token=token).status_code)
    assert answers == [422] * 5 + [429] * 2  # three accounts and a guest, one address
    assert enter(guest, "GUESS-G", token=token, REMOTE_ADDR="198.51.100.7").status_code == 422  # another address
    assert enter(guest, "GUESS-H", token=token, HTTP_X_FORWARDED_FOR="198.51.100.8").status_code == 429  # not trusted


def test_an_automatic_promotion_is_no_code(mug):
    PromotionFactory(name="Everyone", code=None)
    shopper = shopper_client()
    put_line(shopper, "MUG", 1)
    assert enter(shopper, "Everyone").json()["error"]["code"] == "voucher_unknown"
