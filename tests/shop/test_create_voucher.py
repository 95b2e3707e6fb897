"""manage.py create_voucher: a voucher from the command line, or a clear
CommandError and nothing written."""

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from shop.models import Promotion
from tests.factories import ProductFactory

pytestmark = pytest.mark.django_db


def create_voucher(*args: str) -> str:
    out = StringIO()
    call_command("create_voucher", *args, stdout=out)
    return out.getvalue()


def test_create_voucher_percent_on_skus_with_limits_and_a_window():
    ProductFactory(sku="MUG")
    ProductFactory(sku="TEE")
    out = create_voucher(
        "spring-15",
        "--percent",
        "15",
        "--skus",
        "MUG, TEE",
        "--limit",
        "100",
        "--per-customer",
        "2",
        "--min-subtotal",
        "5000",
        "--starts-at",
        "2030-03-01T09:00:00+01:00",
        "--ends-at",
        "2030-04-01",
    )
    voucher = Promotion.objects.get()
    assert out.startswith("SPRING-15: voucher") and "15% off each unit on MUG, TEE" in out
    assert (voucher.code, voucher.kind, voucher.value, voucher.scope) == ("SPRING-15", "percent", 15, "skus")
    assert sorted(voucher.products.values_list("sku", flat=True)) == ["MUG", "TEE"]
    assert (voucher.usage_limit, voucher.per_customer_limit, voucher.min_subtotal) == (100, 2, 5000)
    assert voucher.starts_at == datetime(2030, 3, 1, 8, 0, tzinfo=UTC)
    assert voucher.ends_at == datetime(2030, 4, 1, tzinfo=UTC)  # no offset: the shop's TIME_ZONE (UTC)


def test_create_voucher_amount_is_off_each_unit_with_skus_and_off_the_cart_without():
    ProductFactory(sku="MUG")
    create_voucher("UNIT", "--amount", "200", "--skus", "MUG")
    out = create_voucher("CART", "--amount", "500", "--per-customer", "none")
    unit, cart = Promotion.objects.get(code="UNIT"), Promotion.objects.get(code="CART")
    assert (unit.kind, unit.scope, unit.per_customer_limit) == ("amount", "skus", 1)
    assert (cart.kind, cart.scope, cart.per_customer_limit, cart.usage_limit, cart.ends_at) == (
        "cart_amount",
        "cart",
        None,
        None,
        None,
    )
    assert "500 off the cart on the whole cart" in out and "open-ended" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["X"], "one of the arguments --percent --amount --free-shipping is required"),
        (["X", "--percent", "10", "--amount", "100"], "not allowed with argument"),
        (["X", "--percent", "0"], "--percent/--amount"),
        (["X", "--percent", "101"], "A percentage is 1 to 100"),
        (["X", "--amount", "0"], "--percent/--amount"),
        (["X", "--amount", "10", "--skus", "NOPE"], "--skus: No such SKU: NOPE"),
        (["X", "--amount", "10", "--skus", " , "], "--skus: list at least one SKU"),
        (["not a code", "--percent", "10"], "CODE"),
        (["X" * 33, "--percent", "10"], "CODE"),
        (["X", "--percent", "10", "--limit", "0"], "--limit"),
        (["X", "--percent", "10", "--per-customer", "0"], "--per-customer"),
        (["X", "--percent", "10", "--per-customer", "once"], "--per-customer: a number of uses, or none"),
        (["X", "--percent", "10", "--min-subtotal", "-1"], "--min-subtotal"),
        (["X", "--percent", "10", "--starts-at", "tomorrow"], "--starts-at: not an ISO 8601"),
        (["X", "--percent", "10", "--starts-at", "2030-01-02", "--ends-at", "2030-01-01"], "ends after it starts"),
    ],
)
def test_create_voucher_refuses_bad_input_clearly(args, message):
    ProductFactory(sku="MUG")
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        create_voucher(*args)
    assert not Promotion.objects.exists()


def test_create_voucher_refuses_a_code_taken_in_any_case():
    create_voucher("SPRING", "--percent", "10")
    with pytest.raises(CommandError, match="CODE: Promotion with this Code already exists"):
        create_voucher("spring", "--amount", "100")
    assert Promotion.objects.count() == 1


def test_create_voucher_free_shipping_and_a_part_of_it():
    assert "free shipping on the whole cart" in create_voucher("shipfree", "--free-shipping")
    assert "50% off the shipping on the whole cart" in create_voucher("shiphalf", "--free-shipping", "50")
    free, half = Promotion.objects.get(code="SHIPFREE"), Promotion.objects.get(code="SHIPHALF")
    assert (free.kind, free.value, free.scope) == (Promotion.Kind.FREE_SHIPPING, 100, Promotion.Scope.CART)
    assert half.value == 50
    ProductFactory(sku="MUG")
    with pytest.raises(CommandError, match="whole cart"):
        create_voucher("shipmug", "--free-shipping", "--skus", "MUG")
    with pytest.raises(CommandError):
        create_voucher("shipmore", "--free-shipping", "101")
    assert not Promotion.objects.filter(code__in=["SHIPMUG", "SHIPMORE"]).exists()
