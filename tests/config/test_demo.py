"""config/demo.py and `manage.py seed_demo`: demo logins and catalog, never the well-known
passwords outside DEBUG."""

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from shop.models import Product

pytestmark = pytest.mark.django_db
User = get_user_model()


def seed(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def test_seed_demo_refuses_with_debug_off(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="--i-know-this-is-not-production"):
        seed()
    assert not User.objects.exists() and not Product.objects.exists()


def test_seed_demo_outside_debug_gives_random_passwords_shown_once(settings):
    settings.DEBUG = False
    out = seed("--i-know-this-is-not-production")
    passwords = dict(line.split()[-3::2] for line in out.splitlines() if line.startswith("login:"))
    assert set(passwords) == {"admin", "stockmanager", "ordermanager", "shopper"}
    assert authenticate(username="admin", password="admin") is None
    admin = authenticate(username="admin", password=passwords["admin"])
    assert admin is not None and admin.is_superuser
    assert len(set(passwords.values())) == 4 and all(len(p) >= 16 for p in passwords.values())
    again = seed("--i-know-this-is-not-production")
    assert "admin / (unchanged)" in again and passwords["admin"] not in again


def test_seed_demo_in_debug_keeps_the_well_known_logins(settings):
    settings.DEBUG = True
    out = seed()
    assert "admin / admin" in out
    assert authenticate(username="admin", password="admin").is_superuser
    assert authenticate(username="stockmanager", password="stockmanager").groups.filter(name="Stock managers").exists()
    assert Product.objects.count() == 20


def test_the_demo_has_the_voucher_the_readme_tour_enters(db):
    from config.demo import DEMO_VOUCHER, seed_demo
    from shop.models import Promotion

    seed_demo()
    seed_demo()  # safe to run again
    voucher = Promotion.objects.get(code=DEMO_VOUCHER)
    assert (voucher.kind, voucher.value, voucher.usage_limit, voucher.per_customer_limit) == ("percent", 10, 1000, 1)


def test_the_demo_ships_as_the_readme_tour_says_even_after_a_bench_made_a_method(db):
    from config.demo import seed_demo
    from shop.demo import DEMO_SHIPPING
    from shop.models import ShippingMethod, ShippingZone

    bench_zone = ShippingZone.objects.create(name="Bench zone", countries=["ES"])
    ShippingMethod.objects.create(code="bench-ship", name="Bench shipping", zone=bench_zone, price=499)
    seed_demo()
    seed_demo()  # safe to run again
    codes = set(ShippingMethod.objects.values_list("code", flat=True))
    assert codes == {"bench-ship", *(code for code, *_ in DEMO_SHIPPING)}
    standard = ShippingMethod.objects.get(code="standard")
    assert "GB" in standard.zone.countries
