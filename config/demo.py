"""`manage.py seed_demo`: a demo catalog with stock, and one login per role. It
lives in the wiring layer because it fills several apps (products, stock, users)."""

import secrets
from dataclasses import dataclass, replace

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from inventory.services import receive_stock
from shop.demo import DEMO_PRODUCTS, DEMO_SHIPPING, DEMO_ZONES
from shop.models import Product, Promotion, ShippingMethod, ShippingRateBand, ShippingZone, TaxRate
from shop.promotions import create_voucher
from shop.services import default_address, issue_token_for, set_default_address
from shop.tax_rates import SHIPPED_TAX_RATES, load_tax_rates, read_tax_rates_file

User = get_user_model()


@dataclass(frozen=True)
class DemoLogin:
    role: str
    username: str
    password: str


@dataclass(frozen=True)
class DemoSeed:
    products_created: int
    products_total: int
    logins: list[DemoLogin]
    shopper_token: str


DEMO_ADMIN = DemoLogin("staff (admin)", "admin", "admin")
DEMO_STOCK_MANAGER = DemoLogin("stock manager", "stockmanager", "stockmanager")
DEMO_ORDER_MANAGER = DemoLogin("order manager", "ordermanager", "ordermanager")
DEMO_SHOPPER = DemoLogin("shopper", "shopper", "shopper")
DEMO_ADDRESS = {
    "name": "Demo Shopper",
    "line1": "Calle Mayor 1",
    "line2": "",
    "city": "Madrid",
    "postal_code": "28013",
    "country": "ES",
    "phone": "+34 600 000 000",
}


def _ensure_user(login: DemoLogin, *, random_password: bool, **flags) -> DemoLogin:
    """The demo user, created if missing; the login as it can be used (the password
    shown only when this call set it)."""
    user, created = User.objects.get_or_create(username=login.username, defaults=flags)
    if not created:
        return replace(login, password="(unchanged)")
    password = secrets.token_urlsafe(12) if random_password else login.password
    user.set_password(password)
    user.save(update_fields=["password"])
    return replace(login, password=password)


DEMO_VOUCHER = "WELCOME10"


def _seed_shipping() -> None:
    """The demo's zones and methods, unless the shop has one of them already (a method
    of another code, such as a bench's, does not stop them), and the shipped VAT rates."""
    if not TaxRate.objects.exists():
        load_tax_rates(rows=read_tax_rates_file(SHIPPED_TAX_RATES))
    if ShippingMethod.objects.filter(code__in=[code for code, *_ in DEMO_SHIPPING]).exists():
        return
    zones = {
        name: ShippingZone.objects.get_or_create(name=name, defaults={"countries": countries})[0]
        for name, countries in DEMO_ZONES
    }
    for code, name, zone, price, free_over, (min_days, max_days) in DEMO_SHIPPING:
        by_weight = isinstance(price, list)
        method = ShippingMethod.objects.create(
            code=code,
            name=name,
            zone=zones[zone],
            pricing=ShippingMethod.Pricing.WEIGHT if by_weight else ShippingMethod.Pricing.FLAT,
            price=0 if by_weight else price,
            free_over=free_over,
            min_days=min_days,
            max_days=max_days,
        )
        for up_to, band_price in price if by_weight else ():
            ShippingRateBand.objects.create(method=method, up_to_grams=up_to, price=band_price)


@transaction.atomic
def seed_demo(*, random_passwords: bool = False) -> DemoSeed:
    """Idempotent: existing products, stock and users are left as they are.
    `random_passwords`: new demo users get random passwords (outside DEBUG)."""
    created = 0
    for sku, name, price, stock, weight in DEMO_PRODUCTS:
        defaults = {"name": name, "price": price, "weight_grams": weight}
        _, is_new = Product.objects.get_or_create(sku=sku, defaults=defaults)
        if is_new:
            created += 1
            if stock:
                receive_stock(sku=sku, quantity=stock, note="demo seed")
    _seed_shipping()
    if not Promotion.objects.filter(code=DEMO_VOUCHER).exists():  # the README's tour enters it
        create_voucher(code=DEMO_VOUCHER, percent=10, usage_limit=1000, per_customer_limit=1, name="Welcome, 10% off")
    logins = [
        _ensure_user(
            DEMO_ADMIN, random_password=random_passwords, is_staff=True, is_superuser=True, email="admin@example.com"
        )
    ]
    for login, group in ((DEMO_STOCK_MANAGER, "Stock managers"), (DEMO_ORDER_MANAGER, "Order managers")):
        logins.append(
            _ensure_user(login, random_password=random_passwords, is_staff=True, email=f"{login.username}@example.com")
        )
        User.objects.get(username=login.username).groups.add(Group.objects.get(name=group))
    logins.append(_ensure_user(DEMO_SHOPPER, random_password=random_passwords, email="shopper@example.com"))
    shopper = User.objects.get(username=DEMO_SHOPPER.username)
    if default_address(customer_id=shopper.id) is None:  # checkouts of the README's tour send no body
        set_default_address(customer_id=shopper.id, address=DEMO_ADDRESS)
    token = issue_token_for(shopper)
    return DemoSeed(created, Product.objects.count(), logins, token.token)
