"""shop/promotions.py: creating, ending and finding vouchers (each refusal with its
own code, a 422 in the house's error body), counting their uses exactly under
concurrency, and giving a use back exactly once."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.exceptions import api_exception_handler
from core.hotcache import CachedProduct
from shop.exceptions import VoucherUsedUp
from shop.models import Promotion, VoucherCustomerUse, VoucherRedemption
from shop.promotions import (
    create_promotion,
    create_voucher,
    end_promotions,
    find_voucher,
    give_back_vouchers,
    redeem_voucher,
    save_promotion,
)
from tests.factories import ProductFactory, PromotionFactory, UserFactory
from tests.helpers import run_in_threads

pytestmark = pytest.mark.django_db
PRODUCTS = {
    sku: CachedProduct(sku=sku, name=sku, price=1000, is_active=True, weight_grams=0, tax_class="standard")
    for sku in ("MUG", "TEE")
}


def voucher(code="SPRING", **fields) -> Promotion:
    return PromotionFactory(code=code, per_customer_limit=fields.pop("per_customer_limit", None), **fields)


def find(code, *, customer_id=None, lines=None, now=None):
    return find_voucher(
        code, now=now or timezone.now(), customer_id=customer_id, lines=lines or {"MUG": 1}, products=PRODUCTS
    )


def refusal(code, **kwargs) -> dict:
    """The API's answer to find_voucher's refusal: status and the error body."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the handler says which
        find(code, **kwargs)
    response = api_exception_handler(raised.value, {})
    return {"status": response.status_code, **response.data["error"]}


# --- find_voucher ------------------------------------------------------------------------------


def test_find_voucher_is_case_insensitive_and_one_query():
    mug = ProductFactory(sku="MUG")
    created = voucher("SPRING-10", scope=Promotion.Scope.SKUS, products=[mug], value=15, usage_limit=5)
    user = UserFactory()
    with CaptureQueriesContext(connection) as queries:
        found = find("  spring-10 ", customer_id=user.id)
    assert len(queries) == 1
    assert (found.id, found.code, found.value, found.skus, found.usage_limit) == (
        created.id,
        "SPRING-10",
        15,
        frozenset({"MUG"}),
        5,
    )


def test_find_voucher_refuses_an_unknown_code_with_a_422():
    voucher("SPRING")
    assert refusal("AUTUMN") == {
        "status": 422,
        "code": "voucher_unknown",
        "message": "There is no voucher with that code.",
        "details": {"voucher": "AUTUMN"},
    }
    with CaptureQueriesContext(connection) as queries:  # what cannot be a code costs no query
        assert refusal("no such code!")["code"] == "voucher_unknown"
        assert refusal("X" * 33)["code"] == "voucher_unknown"
    assert len(queries) == 0


def test_find_voucher_refuses_outside_the_window():
    now = timezone.now()
    voucher("LATER", starts_at=now + timedelta(minutes=1))
    voucher("OVER", starts_at=now - timedelta(days=2), ends_at=now)
    later = refusal("LATER", now=now)
    assert (later["status"], later["code"]) == (422, "voucher_not_started")
    over = refusal("OVER", now=now)
    assert (over["status"], over["code"]) == (422, "voucher_expired")
    assert find("LATER", now=now + timedelta(minutes=1)).code == "LATER"


def test_find_voucher_refuses_a_voucher_used_up_in_all_or_by_this_shopper():
    user, other = UserFactory(), UserFactory()
    used_up = voucher("GONE", usage_limit=2, uses=2)
    once = voucher("ONCE", per_customer_limit=1)
    VoucherCustomerUse.objects.create(voucher=once, customer=user, uses=1, cap=1)
    assert refusal("GONE")["code"] == "voucher_used_up" and used_up.remaining_uses == 0
    mine = refusal("ONCE", customer_id=user.id)
    assert (mine["status"], mine["code"]) == (422, "voucher_used_up")
    assert find("ONCE", customer_id=other.id).code == "ONCE"
    assert find("ONCE").code == "ONCE"  # a guest: counted when checking out


def test_find_voucher_refuses_a_cart_it_does_not_apply_to():
    mug = ProductFactory(sku="MUG")
    voucher("MUGS", scope=Promotion.Scope.SKUS, products=[mug])
    voucher("BIG", min_subtotal=2001)
    not_mugs = refusal("MUGS", lines={"TEE": 3})
    assert (not_mugs["status"], not_mugs["code"]) == (422, "voucher_not_applicable")
    small = refusal("BIG", lines={"MUG": 1, "TEE": 1})
    assert small["code"] == "voucher_not_applicable"
    assert small["details"] == {"voucher": "BIG", "min_subtotal": 2001, "subtotal": 2000}
    assert find("BIG", lines={"MUG": 1, "TEE": 2}).code == "BIG"
    assert refusal("BIG", lines={})["code"] == "voucher_not_applicable"  # an empty cart


# --- redeem_voucher and give_back_vouchers ------------------------------------------------------


def test_redeem_voucher_counts_the_use_the_redemption_and_the_shoppers_count():
    user = UserFactory()
    spring = voucher(usage_limit=10, per_customer_limit=2)
    redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=501)
    redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=502)
    spring.refresh_from_db()
    assert (spring.uses, spring.remaining_uses) == (2, 8)
    redemption = VoucherRedemption.objects.get(order_id=501)
    assert (redemption.voucher_id, redemption.customer_id, redemption.customer_counted) == (spring.id, user.id, True)
    assert VoucherCustomerUse.objects.filter(voucher=spring, customer=user).values_list("uses", "cap").get() == (2, 2)
    # A third of this shopper's: refused, and the caller's transaction rolls back as a whole.
    with pytest.raises(VoucherUsedUp), transaction.atomic():
        redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=503)
    spring.refresh_from_db()
    assert spring.uses == 2 and sorted(VoucherRedemption.objects.values_list("order_id", flat=True)) == [501, 502]


def test_redeem_voucher_refuses_past_the_limit_and_one_voucher_per_order():
    first, second = UserFactory(), UserFactory()
    spring = voucher(usage_limit=1)
    autumn = voucher("AUTUMN")
    redeem_voucher(voucher_id=spring.id, customer_id=first.id, order_id=1)
    with pytest.raises(VoucherUsedUp), transaction.atomic():
        redeem_voucher(voucher_id=spring.id, customer_id=second.id, order_id=2)
    with pytest.raises(IntegrityError), transaction.atomic():  # the stacking rule, also a constraint
        redeem_voucher(voucher_id=autumn.id, customer_id=first.id, order_id=1)
    assert Promotion.objects.get(pk=spring.pk).uses == 1
    assert not VoucherCustomerUse.objects.exists()  # no per-customer limit: no count kept


def test_redeem_voucher_refuses_an_automatic_promotion():
    with pytest.raises(VoucherUsedUp), transaction.atomic():
        redeem_voucher(voucher_id=PromotionFactory().id, customer_id=UserFactory().id, order_id=1)


def test_a_per_customer_limit_raised_later_lets_the_shopper_use_it_again():
    user = UserFactory()
    once = voucher(per_customer_limit=1)
    redeem_voucher(voucher_id=once.id, customer_id=user.id, order_id=1)
    once.per_customer_limit = 2
    save_promotion(promotion=once)
    redeem_voucher(voucher_id=once.id, customer_id=user.id, order_id=2)
    assert VoucherCustomerUse.objects.values_list("uses", "cap").get() == (2, 2)


def test_give_back_vouchers_gives_back_once():
    user = UserFactory()
    spring = voucher(usage_limit=3, per_customer_limit=1)
    redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=7)
    assert give_back_vouchers(order_ids=[7, 8]) == 1  # 8 used no voucher
    assert give_back_vouchers(order_ids=[7]) == 0
    spring.refresh_from_db()
    assert spring.uses == 0 and not VoucherRedemption.objects.exists()
    assert VoucherCustomerUse.objects.get().uses == 0
    redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=9)  # the shopper may use it again


def test_give_back_vouchers_takes_back_only_what_was_counted():
    user = UserFactory()
    spring = voucher(per_customer_limit=None)
    redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=1)  # no per-customer count then
    spring.per_customer_limit = 1
    save_promotion(promotion=spring)
    redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=2)
    give_back_vouchers(order_ids=[1])
    assert VoucherCustomerUse.objects.get().uses == 1  # order 2's use still counts
    assert Promotion.objects.get(pk=spring.pk).uses == 1


# --- under concurrency: real threads, each with its own connection ------------------------------


def redeem(spring: Promotion, customer, order_id: int) -> str:
    """One checkout's redemption in a transaction of its own: "redeemed" or "used_up"."""
    try:
        with transaction.atomic():
            redeem_voucher(voucher_id=spring.id, customer_id=customer.id, order_id=order_id)
        return "redeemed"
    except VoucherUsedUp:
        return "used_up"


@pytest.mark.django_db(transaction=True)
def test_40_concurrent_redemptions_of_a_voucher_limited_to_10():
    spring = voucher(usage_limit=10, per_customer_limit=1)
    customers = [UserFactory() for _ in range(40)]

    outcomes = run_in_threads([lambda c=c, i=i: redeem(spring, c, 1000 + i) for i, c in enumerate(customers)])
    assert sorted(outcomes) == ["redeemed"] * 10 + ["used_up"] * 30
    assert Promotion.objects.get(pk=spring.pk).uses == 10
    assert VoucherRedemption.objects.filter(voucher=spring).count() == 10
    assert sorted(VoucherCustomerUse.objects.values_list("uses", flat=True)) == [1] * 10
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_one_shopper_redeeming_from_10_threads_with_a_per_customer_limit_of_1():
    spring = voucher(per_customer_limit=1)  # no limit in all: only the shopper's stops them
    customer = UserFactory()

    outcomes = run_in_threads([lambda i=i: redeem(spring, customer, 2000 + i) for i in range(10)])
    assert sorted(outcomes) == ["redeemed"] + ["used_up"] * 9
    assert Promotion.objects.get(pk=spring.pk).uses == 1
    assert VoucherRedemption.objects.count() == 1
    assert VoucherCustomerUse.objects.values_list("uses", "cap").get() == (1, 1)
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_concurrent_give_backs_of_one_order_give_back_once():
    spring = voucher(usage_limit=5, per_customer_limit=1)
    customer = UserFactory()
    redeem_voucher(voucher_id=spring.id, customer_id=customer.id, order_id=42)

    def give_back():
        with transaction.atomic():
            return give_back_vouchers(order_ids=[42])

    assert sorted(run_in_threads([give_back] * 8)) == [0] * 7 + [1]
    assert Promotion.objects.get(pk=spring.pk).uses == 0
    assert VoucherCustomerUse.objects.get().uses == 0
    connection.close()


# --- creating, editing, ending ------------------------------------------------------------------


def test_create_promotion_checks_what_the_table_checks():
    ProductFactory(sku="MUG")
    cases = [
        ({"kind": "percent", "value": 101}, "__all__"),
        ({"kind": "amount", "value": 0}, "value"),
        ({"kind": "cart_amount", "value": 100, "scope": "skus", "skus": ["MUG"]}, "__all__"),
        ({"scope": "skus", "skus": ["NOPE"]}, "products"),
        ({"scope": "skus"}, "products"),
        ({"code": "not a code"}, "code"),
        ({"usage_limit": 5}, "__all__"),  # a limit on an automatic promotion
        ({"code": "X", "usage_limit": 0}, "usage_limit"),
        ({"starts_at": timezone.now(), "ends_at": timezone.now() - timedelta(seconds=1)}, "__all__"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as raised:
            create_promotion(**{"name": "x", "kind": "percent", "value": 10, "scope": "cart", **fields})
        assert field in raised.value.message_dict, (fields, raised.value.message_dict)
    assert not Promotion.objects.exists()


def test_create_voucher_upper_cases_the_code_and_refuses_it_twice_in_any_case():
    created = create_voucher(code="spring-10", percent=10)
    shape = (created.code, created.kind, created.scope, created.per_customer_limit)
    assert shape == ("SPRING-10", "percent", "cart", 1)
    with pytest.raises(ValidationError) as raised:
        create_voucher(code="Spring-10", amount=100)
    assert raised.value.message_dict == {"code": ["Promotion with this Code already exists."]}


def test_save_promotion_never_puts_back_a_count_that_grew_meanwhile():
    spring = voucher(usage_limit=10)
    form_copy = Promotion.objects.get(pk=spring.pk)  # what a form read
    redeem_voucher(voucher_id=spring.id, customer_id=UserFactory().id, order_id=1)
    form_copy.name = "Spring sale"
    save_promotion(promotion=form_copy)
    spring.refresh_from_db()
    assert (spring.name, spring.uses) == ("Spring sale", 1)


def test_end_promotions_ends_those_running_only():
    now = timezone.now()
    running = PromotionFactory()
    upcoming = PromotionFactory(starts_at=now + timedelta(days=1))
    over = PromotionFactory(starts_at=now - timedelta(days=2), ends_at=now - timedelta(days=1))
    assert end_promotions(promotion_ids=[running.pk, upcoming.pk, over.pk], now=now) == 1
    assert Promotion.objects.get(pk=running.pk).ends_at == now
    assert Promotion.objects.get(pk=upcoming.pk).ends_at is None
    assert Promotion.objects.get(pk=over.pk).ends_at == now - timedelta(days=1)


def test_a_redemption_is_one_statement_and_a_give_back_a_few_with_no_savepoint():
    user = UserFactory()
    spring = voucher(usage_limit=10, per_customer_limit=1)
    with transaction.atomic(), CaptureQueriesContext(connection) as redeeming:
        redeem_voucher(voucher_id=spring.id, customer_id=user.id, order_id=1)
    with transaction.atomic(), CaptureQueriesContext(connection) as giving_back:
        give_back_vouchers(order_ids=[1])
    # The voucher's count, the shopper's, the redemption: one statement (a checkout with a voucher
    # sends one more than without); then the redemption read and deleted, both counts down.
    assert [query["sql"].split()[0] for query in redeeming] == ["WITH"]
    assert [query["sql"].split()[0] for query in giving_back] == ["SELECT", "DELETE", "UPDATE", "UPDATE"]


def test_redeeming_and_giving_back_leave_the_hot_caches_alone(redis, django_capture_on_commit_callbacks):
    spring = voucher(usage_limit=10, per_customer_limit=1)
    generation = redis.get("shop:cache-generation")
    with django_capture_on_commit_callbacks(execute=True):
        redeem_voucher(voucher_id=spring.id, customer_id=UserFactory().id, order_id=1)
        give_back_vouchers(order_ids=[1])
    assert redis.get("shop:cache-generation") == generation  # a checkout drops no process's caches
