"""shop/admin.py: the admin's password change goes through the service, so it
ends every API session of the user at once, as the API's does; staff create,
edit, end and inspect promotions and vouchers."""

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken

from shop.models import Promotion
from shop.promotions import redeem_voucher
from tests.factories import ProductFactory, PromotionFactory, UserFactory, api_token
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


# --- promotions and vouchers --------------------------------------------------------------------


def promotion_form(**fields) -> dict:
    """The promotion admin's form as a browser posts it (its date-times split in two)."""
    starts_at = timezone.localtime(fields.pop("starts_at", timezone.now() - timedelta(minutes=5)))
    body = {
        "name": "Spring",
        "kind": "percent",
        "value": "10",
        "scope": "cart",
        "min_subtotal": "0",
        "starts_at_0": starts_at.strftime("%Y-%m-%d"),
        "starts_at_1": starts_at.strftime("%H:%M:%S"),
        "ends_at_0": "",
        "ends_at_1": "",
        "code": "",
        "usage_limit": "",
        "per_customer_limit": "",
    }
    body.update({name: str(value) if not isinstance(value, list) else value for name, value in fields.items()})
    return body


def test_promotion_admin_lists_kind_value_window_code_uses_and_remaining_uses():
    now = timezone.now()
    PromotionFactory(name="Spring vouchers", code="SPRING", usage_limit=10, uses=3, per_customer_limit=1)
    PromotionFactory(
        name="Last winter",
        kind=Promotion.Kind.CART_AMOUNT,
        value=500,
        starts_at=now - timedelta(days=90),
        ends_at=now - timedelta(days=30),
    )
    response = staff_client(superuser=True).get("/admin/shop/promotion/")
    assert response.status_code == 200
    rows = response.content.decode().split("<tbody>")[1].split("<tr>")
    spring, winter = (next(row for row in rows if f">{name}</a>" in row) for name in ("Spring vouchers", "Last winter"))
    assert "10% off each unit" in spring and "SPRING" in spring and ">7<" in spring and "icon-yes" in spring
    assert "€5.00 off the cart" in winter and "open-ended" not in winter and "icon-no" in winter


def test_promotion_admin_adds_a_voucher_upper_casing_its_code():
    admin = staff_client(superuser=True)
    ProductFactory(sku="MUG")
    assert 'name="per_customer_limit" value="1"' in admin.get("/admin/shop/promotion/add/").content.decode()
    body = promotion_form(code="spring-10", scope="skus", products=["MUG"], usage_limit=100, per_customer_limit=1)
    response = admin.post("/admin/shop/promotion/add/", body)
    assert response.status_code == 302, response.content.decode()
    created = Promotion.objects.get()
    assert (created.code, created.usage_limit, created.per_customer_limit, created.uses) == ("SPRING-10", 100, 1, 0)
    assert list(created.products.values_list("sku", flat=True)) == ["MUG"]
    again = admin.post("/admin/shop/promotion/add/", promotion_form(code="Spring-10", name="twice"))
    assert again.status_code == 200 and "already exists" in again.content.decode()


def test_promotion_admin_refuses_what_the_table_would(django_capture_on_commit_callbacks):
    admin = staff_client(superuser=True)
    cases = [
        (promotion_form(usage_limit=10), "Only a voucher"),  # an automatic promotion has no limit
        (promotion_form(kind="cart_amount", value=500, scope="skus"), "applies to the whole cart"),
        (promotion_form(scope="skus"), "List the SKUs"),
        (promotion_form(value=150), "A percentage is 1 to 100"),
        (promotion_form(code="no spaces"), "letters, digits or dashes"),
        (promotion_form(ends_at_0="2000-01-01", ends_at_1="00:00:00"), "ends after it starts"),
    ]
    for body, message in cases:
        response = admin.post("/admin/shop/promotion/add/", body)
        assert response.status_code == 200 and message in response.content.decode(), message
    assert not Promotion.objects.exists()
    # An edit never takes the limit below the uses so far, nor writes `uses` back.
    spring = PromotionFactory(code="SPRING", usage_limit=10, uses=3)
    url = f"/admin/shop/promotion/{spring.pk}/change/"
    response = admin.post(url, promotion_form(code="SPRING", usage_limit=2))
    assert response.status_code == 200 and "cannot be below that" in response.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        assert admin.post(url, promotion_form(code="SPRING", usage_limit=20, name="Spring!")).status_code == 302
    spring.refresh_from_db()
    assert (spring.name, spring.usage_limit, spring.uses) == ("Spring!", 20, 3)


def test_promotion_admin_change_page_shows_the_redemptions_and_their_orders():
    spring = PromotionFactory(code="SPRING", usage_limit=10)
    for order_id in (11, 12):
        redeem_voucher(voucher_id=spring.id, customer_id=UserFactory().id, order_id=order_id)
    page = staff_client(superuser=True).get(f"/admin/shop/promotion/{spring.pk}/change/").content.decode()
    assert "2 so far; orders: 12, 11" in page
    assert f"/admin/shop/voucherredemption/?voucher__id__exact={spring.pk}" in page
    listed = staff_client(superuser=True).get(f"/admin/shop/voucherredemption/?voucher__id__exact={spring.pk}")
    assert listed.status_code == 200 and "SPRING" in listed.content.decode()


def test_promotion_admin_ends_selected_promotions_now(redis, django_capture_on_commit_callbacks):
    running, upcoming = PromotionFactory(), PromotionFactory(starts_at=timezone.now() + timedelta(days=1))
    generation = int(redis.get("shop:cache-generation") or 0)
    body = {"action": "end_now", "_selected_action": [running.pk, upcoming.pk]}
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client(superuser=True).post("/admin/shop/promotion/", body, follow=True)
    page = response.content.decode()
    assert "1 promotion(s) ended." in page and "1 not ended" in page
    running.refresh_from_db()
    upcoming.refresh_from_db()
    assert running.ends_at is not None and running.ends_at <= timezone.now() and upcoming.ends_at is None
    assert int(redis.get("shop:cache-generation")) == generation + 2  # the caches hear of it


def test_stock_managers_run_promotions():
    from tests.helpers import staff_client

    manager = staff_client("Stock managers")
    assert manager.get("/admin/shop/promotion/").status_code == 200
    assert manager.get("/admin/shop/promotion/add/").status_code == 200
    assert manager.get("/admin/shop/voucherredemption/").status_code == 200


def test_a_promotion_form_opened_before_the_promotion_ended_does_not_reopen_it(django_capture_on_commit_callbacks):
    """Only what the form changed is written: the end another member of staff
    set while this form was open stays when the form saves a new name."""
    from shop.promotions import end_promotions

    started = timezone.now() - timedelta(hours=1)
    spring = PromotionFactory(name="Spring", starts_at=started)
    opened = promotion_form(starts_at=started)  # as the form showed it: open-ended
    initial = {f"initial-{name}": value for name, value in opened.items()}
    end_promotions(promotion_ids=[spring.pk])
    admin = staff_client(superuser=True)
    with django_capture_on_commit_callbacks(execute=True):
        saved = admin.post(
            f"/admin/shop/promotion/{spring.pk}/change/",
            {**promotion_form(starts_at=started, name="Spring sale"), **initial},
        )
    assert saved.status_code == 302
    spring.refresh_from_db()
    assert spring.name == "Spring sale" and spring.ends_at is not None


def test_product_admin_lists_prices_as_money_and_asks_for_minor_units():
    ProductFactory(sku="MUG", price=123456789)
    admin = staff_client(superuser=True)
    listing = admin.get("/admin/shop/product/").content.decode()
    assert '<td class="field-price_shown">€1,234,567.89</td>' in listing
    form = admin.get("/admin/shop/product/MUG/change/").content.decode()
    assert 'name="price" value="123456789"' in form  # typed as an integer, in minor units
    assert "In minor units (cents): 1299 = €12.99." in form


def test_a_product_page_that_only_shows_it_shows_its_price_as_money():
    from django.contrib.auth.models import Permission

    ProductFactory(sku="MUG", price=1299)
    viewer = staff_client()
    viewer.user.user_permissions.add(Permission.objects.get(codename="view_product"))
    page = viewer.get("/admin/shop/product/MUG/change/").content.decode()
    assert '<div class="readonly">€12.99</div>' in page and 'name="price"' not in page


def test_promotion_admin_shows_amounts_and_minimum_subtotals_as_money():
    PromotionFactory(name="Mugs", kind=Promotion.Kind.AMOUNT, value=250, min_subtotal=5000)
    admin = staff_client(superuser=True)
    listing = admin.get("/admin/shop/promotion/").content.decode()
    assert "€2.50 off each unit" in listing and '<td class="field-minimum">€50.00</td>' in listing
    form = admin.get("/admin/shop/promotion/add/").content.decode()
    assert "for an amount, minor units (cents): 1299 = €12.99." in form
    assert "In minor units (cents): 1299 = €12.99. Applies only when" in form


def test_a_flash_sales_promotion_page_shows_its_price_as_money(django_capture_on_commit_callbacks):
    from inventory.services.flash_sales import seed_flash_sale

    with django_capture_on_commit_callbacks(execute=True):
        sale = seed_flash_sale(sku="HOT", stock=5, price=1000, sale_price=700)
    admin = staff_client(superuser=True)
    assert "each unit at €7.00" in admin.get("/admin/shop/promotion/").content.decode()
    page = admin.get(f"/admin/shop/promotion/{sale.promotion_id}/change/").content.decode()
    assert '<div class="readonly">each unit at €7.00</div>' in page and ">700<" not in page
