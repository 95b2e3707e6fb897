"""shop/admin.py for tax and shipping: staff edit tax classes, dated rates, zones
(real ISO 3166-1 alpha-2 codes only) and methods with their weight bands (a
method priced by weight has at least one); a product's weight and tax class;
a free-shipping promotion."""

from datetime import timedelta

import pytest
from django.utils import timezone

from shop.models import Product, Promotion, ShippingMethod, ShippingRateBand, ShippingZone, TaxClass, TaxRate
from shop.promotions import create_promotion
from tests.factories import ProductFactory
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin():
    return staff_client(superuser=True)


@pytest.fixture
def zone():
    return ShippingZone.objects.create(name="UK and Ireland", countries=["GB", "IE"])


def method_form(zone, bands=(), initial_bands=0, **fields) -> dict:
    """The method admin's form with its weight bands' inline, as a browser posts it."""
    body = {
        "code": "standard",
        "name": "Standard",
        "zone": str(zone.pk),
        "pricing": "flat",
        "price": "495",
        "free_over": "",
        "min_days": "2",
        "max_days": "4",
        "is_active": "on",
        "bands-TOTAL_FORMS": str(len(bands)),
        "bands-INITIAL_FORMS": str(initial_bands),
        "bands-MIN_NUM_FORMS": "0",
        "bands-MAX_NUM_FORMS": "1000",
    }
    for index, band in enumerate(bands):
        body.update({f"bands-{index}-{name}": str(value) for name, value in band.items()})
    body.update({name: str(value) for name, value in fields.items()})
    return body


# --- tax classes and rates ----------------------------------------------------------------------


def test_tax_rate_admin_lists_rates_as_percent_too_and_filters_by_country_and_class(admin):
    TaxRate.objects.create(country="FR", tax_class_id="reduced", rate=550, valid_from="2026-01-01", source="EC")
    TaxRate.objects.create(country="DE", tax_class_id="standard", rate=1900, valid_from="2026-01-01", source="EC")
    listing = admin.get("/admin/shop/taxrate/").content.decode()
    assert '<td class="field-percent">5.5%</td>' in listing and '<td class="field-percent">19%</td>' in listing
    only_france = admin.get("/admin/shop/taxrate/?country=FR&tax_class__code__exact=reduced").content.decode()
    assert "5.5%" in only_france and "19%" not in only_france


def test_tax_rate_admin_takes_a_country_in_any_case_and_refuses_one_that_does_not_exist(admin):
    body = {"country": "gb", "tax_class": "standard", "rate": "2000", "valid_from": "2026-01-01", "source": "HMRC"}
    assert admin.post("/admin/shop/taxrate/add/", body).status_code == 302
    assert TaxRate.objects.get().country == "GB"
    for country, message in [("UK", "&#x27;UK&#x27; is not an ISO 3166-1 alpha-2 country code"), ("", "required")]:
        response = admin.post("/admin/shop/taxrate/add/", {**body, "country": country, "valid_from": "2027-01-01"})
        assert response.status_code == 200 and message in response.content.decode(), country
    response = admin.post("/admin/shop/taxrate/add/", {**body, "rate": "10001", "valid_from": "2027-01-01"})
    assert response.status_code == 200 and "less than or equal to 10000" in response.content.decode()
    again = admin.post("/admin/shop/taxrate/add/", body)  # the same class, country and day
    assert again.status_code == 200 and "already exists" in again.content.decode()
    assert TaxRate.objects.count() == 1


def test_tax_class_admin_sets_the_code_once_and_keeps_standard(admin):
    assert admin.post("/admin/shop/taxclass/add/", {"code": "books", "name": "Books"}).status_code == 302
    form = admin.get("/admin/shop/taxclass/books/change/").content.decode()
    assert 'name="code"' not in form and 'name="name"' in form
    assert admin.get("/admin/shop/taxclass/standard/delete/").status_code == 403
    assert admin.get("/admin/shop/taxclass/books/delete/").status_code == 200
    refused = admin.post("/admin/shop/taxclass/add/", {"code": "Books!", "name": "x"})
    assert refused.status_code == 200 and not TaxClass.objects.filter(name="x").exists()


# --- zones ----------------------------------------------------------------------------------------


def test_shipping_zone_admin_takes_codes_in_any_case_once_each(admin):
    response = admin.post("/admin/shop/shippingzone/add/", {"name": "Iberia", "countries": "es, pt ES"})
    assert response.status_code == 302
    assert ShippingZone.objects.get(name="Iberia").countries == ["ES", "PT"]
    form = admin.get(f"/admin/shop/shippingzone/{ShippingZone.objects.get().pk}/change/").content.decode()
    assert 'value="ES, PT"' in form
    assert "ES, PT" in admin.get("/admin/shop/shippingzone/").content.decode()


@pytest.mark.parametrize(
    "countries, message",
    [
        ("GB, UK, GBR, 826", "Not ISO 3166-1 alpha-2 country codes: UK, GBR, 826"),
        ("EU", "Not ISO 3166-1 alpha-2 country codes: EU"),
        (" , ", "This field is required."),
    ],
)
def test_shipping_zone_admin_refuses_codes_that_do_not_exist(admin, countries, message):
    response = admin.post("/admin/shop/shippingzone/add/", {"name": "Somewhere", "countries": countries})
    assert response.status_code == 200 and message in response.content.decode()
    assert not ShippingZone.objects.exists()


# --- methods and their bands ------------------------------------------------------------------------


def test_shipping_method_admin_lists_pricing_price_free_over_and_days(admin, zone):
    ShippingMethod.objects.create(code="standard", name="Standard", zone=zone, price=495, free_over=5000)
    parcel = ShippingMethod.objects.create(code="parcel", name="Parcel", zone=zone, pricing="weight", max_days=1)
    ShippingRateBand.objects.create(method=parcel, up_to_grams=2000, price=700)
    ShippingRateBand.objects.create(method=parcel, up_to_grams=10000, price=1500)
    listing = admin.get("/admin/shop/shippingmethod/").content.decode()
    for cell in [
        '<td class="field-price_shown">€4.95</td>',
        '<td class="field-free_over_shown">€50.00</td>',
        '<td class="field-days">1-3</td>',  # the defaults
        '<td class="field-price_shown">by weight (2 bands)</td>',
        '<td class="field-free_over_shown">-</td>',
        '<td class="field-days">1</td>',
    ]:
        assert cell in listing, cell
    form = admin.get(f"/admin/shop/shippingmethod/{parcel.pk}/change/").content.decode()
    assert 'name="bands-0-up_to_grams" value="2000"' in form and 'name="code"' not in form  # set once


def test_a_flat_method_needs_no_band(admin, zone):
    response = admin.post("/admin/shop/shippingmethod/add/", method_form(zone))
    assert response.status_code == 302, response.content.decode()
    method = ShippingMethod.objects.get()
    assert (method.pricing, method.price, method.min_days, method.max_days) == ("flat", 495, 2, 4)
    assert not method.bands.exists()


def test_a_method_priced_by_weight_needs_a_band(admin, zone):
    body = method_form(zone, pricing="weight")
    response = admin.post("/admin/shop/shippingmethod/add/", body)
    assert response.status_code == 200
    assert "A method priced by weight needs at least one weight band" in response.content.decode()
    assert not ShippingMethod.objects.exists()
    # An extra band left blank is no band.
    blank = method_form(zone, bands=[{"up_to_grams": "", "price": ""}], pricing="weight")
    assert "needs at least one weight band" in admin.post("/admin/shop/shippingmethod/add/", blank).content.decode()

    with_bands = method_form(
        zone, bands=[{"up_to_grams": 2000, "price": 700}, {"up_to_grams": 10000, "price": 1500}], pricing="weight"
    )
    assert admin.post("/admin/shop/shippingmethod/add/", with_bands).status_code == 302
    method = ShippingMethod.objects.get()
    assert list(method.bands.values_list("up_to_grams", "price")) == [(2000, 700), (10000, 1500)]


def test_a_method_priced_by_weight_cannot_lose_its_last_band(admin, zone):
    method = ShippingMethod.objects.create(code="parcel", name="Parcel", zone=zone, pricing="weight")
    band = ShippingRateBand.objects.create(method=method, up_to_grams=2000, price=700)
    url = f"/admin/shop/shippingmethod/{method.pk}/change/"
    delete = {"id": band.pk, "method": method.pk, "up_to_grams": 2000, "price": 700, "DELETE": "on"}
    body = method_form(zone, bands=[delete], initial_bands=1, code="parcel", name="Parcel", pricing="weight")
    response = admin.post(url, body)
    assert response.status_code == 200 and "needs at least one weight band" in response.content.decode()
    assert method.bands.count() == 1
    # Priced flat, it may lose it (a flat method ignores its bands).
    assert admin.post(url, {**body, "pricing": "flat"}).status_code == 302
    assert not method.bands.exists()


@pytest.mark.parametrize(
    "fields, bands, message",
    [
        ({"min_days": 5, "max_days": 2}, [], "The longest estimate is at least the shortest."),
        ({"code": "Next Day"}, [], "1-32 of a-z 0-9 -"),
        ({"price": -1}, [], "greater than or equal to 0"),
        (
            {"pricing": "weight"},
            [{"up_to_grams": 2000, "price": 700}, {"up_to_grams": 2000, "price": 900}],
            "Please correct the duplicate data for up_to_grams",
        ),
        ({"pricing": "weight"}, [{"up_to_grams": 0, "price": 700}], "greater than or equal to 1"),
    ],
)
def test_shipping_method_admin_refuses_what_the_table_would(admin, zone, fields, bands, message):
    response = admin.post("/admin/shop/shippingmethod/add/", method_form(zone, bands=bands, **fields))
    assert response.status_code == 200 and message in response.content.decode(), message
    assert not ShippingMethod.objects.exists()


# --- products and promotions ------------------------------------------------------------------------


def test_product_admin_shows_and_edits_weight_and_tax_class(admin):
    ProductFactory(sku="BOOK", name="Book", price=1299)
    listing = admin.get("/admin/shop/product/").content.decode()
    assert '<td class="field-weight_grams">0</td>' in listing
    assert '<td class="field-tax_class nowrap">Standard rate' in listing
    form = admin.get("/admin/shop/product/BOOK/change/").content.decode()
    assert 'name="weight_grams"' in form and 'name="tax_class"' in form
    body = {"name": "Book", "price": "1299", "weight_grams": "450", "tax_class": "reduced", "is_active": "on"}
    body.update({"description": "", "image_url": ""})
    assert admin.post("/admin/shop/product/BOOK/change/", body).status_code == 302
    product = Product.objects.get(sku="BOOK")
    assert (product.weight_grams, product.tax_class_id) == (450, "reduced")
    refused = admin.post("/admin/shop/product/BOOK/change/", {**body, "weight_grams": "-5", "tax_class": "luxury"})
    content = refused.content.decode()
    assert refused.status_code == 200 and "greater than or equal to 0" in content and "Select a valid choice" in content
    assert "reduced" in admin.get("/admin/shop/product/?tax_class__code__exact=reduced").content.decode()


def _promotion_body(**fields) -> dict:
    starts_at = timezone.localtime(timezone.now() - timedelta(minutes=5))
    body = {
        "name": "Free delivery",
        "kind": "free_shipping",
        "value": "100",
        "scope": "cart",
        "min_subtotal": "5000",
        "starts_at_0": starts_at.strftime("%Y-%m-%d"),
        "starts_at_1": starts_at.strftime("%H:%M:%S"),
        "ends_at_0": "",
        "ends_at_1": "",
        "code": "",
        "usage_limit": "",
        "per_customer_limit": "",
    }
    return {**body, **{name: str(value) for name, value in fields.items()}}


def test_promotion_admin_makes_a_free_shipping_promotion_and_voucher(admin):
    assert '<option value="free_shipping">' in admin.get("/admin/shop/promotion/add/").content.decode()
    assert admin.post("/admin/shop/promotion/add/", _promotion_body()).status_code == 302
    half = _promotion_body(name="Half-price delivery", value=50, code="ship-half", per_customer_limit=1)
    assert admin.post("/admin/shop/promotion/add/", half).status_code == 302
    assert set(Promotion.objects.values_list("kind", "value", "scope", "code")) == {
        ("free_shipping", 100, "cart", None),
        ("free_shipping", 50, "cart", "SHIP-HALF"),
    }
    listing = admin.get("/admin/shop/promotion/").content.decode()
    assert "free shipping" in listing and "50% off the shipping" in listing


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"value": 101}, "A percentage is 1 to 100"),
        ({"scope": "skus"}, "A shipping discount applies to the whole cart."),
    ],
)
def test_promotion_admin_refuses_a_shipping_discount_the_table_would(admin, fields, message):
    ProductFactory(sku="MUG")
    response = admin.post("/admin/shop/promotion/add/", _promotion_body(products=["MUG"], **fields))
    assert response.status_code == 200 and message in response.content.decode(), message
    assert not Promotion.objects.exists()


def test_create_promotion_takes_a_free_shipping_kind():
    promotion = create_promotion(name="Free delivery", kind="free_shipping", value=100, scope="cart")
    assert promotion.discount_label == "free shipping"
