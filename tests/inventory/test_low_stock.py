"""Low-stock alerts: an order leaving a SKU below its threshold tells the stock
managers by email, through the warehouse consumer, at most once per SKU a day."""

import pytest
from django.contrib.auth.models import Group
from django.core import mail

from inventory.handlers import alert_low_stock
from inventory.models import LowStockAlert, Stock
from tests.factories import UserFactory, product_with_stock
from tests.helpers import consumer_event, wall_clock_back_to_midday

pytestmark = pytest.mark.django_db


def created(*skus):
    items = [{"sku": sku, "name": sku, "quantity": 1, "unit_price": 1} for sku in skus]
    return consumer_event("OrderCreated", order_id=1, customer_id=1, total=1, currency="EUR", items=items)


@pytest.fixture
def managers():
    group = Group.objects.get(name="Stock managers")
    people = [UserFactory(is_staff=True, email=f"stock{i}@example.com") for i in range(2)]
    for person in people:
        person.groups.add(group)
    UserFactory(is_staff=True, email="orders@example.com")  # not a stock manager
    return people


def test_one_email_per_sku_per_day_to_the_stock_managers(managers, settings, monkeypatch):
    wall_clock_back_to_midday(monkeypatch)  # both orders on one day, whenever the test runs
    settings.LOW_STOCK_THRESHOLD = 10
    product_with_stock(sku="LOW", available=3)
    product_with_stock(sku="PLENTY", available=50)
    alert_low_stock(created("LOW", "PLENTY"))
    alert_low_stock(created("LOW"))  # a later order the same day
    [email] = mail.outbox
    assert email.subject == "Low stock: LOW (3 left)"
    assert sorted(email.to) == ["stock0@example.com", "stock1@example.com"]
    assert list(LowStockAlert.objects.values_list("product_id", "available", "threshold")) == [("LOW", 3, 10)]


def test_a_per_product_threshold_wins(managers, settings):
    settings.LOW_STOCK_THRESHOLD = 10
    product_with_stock(sku="BULKY", available=40)
    product_with_stock(sku="RARE", available=3)
    Stock.objects.filter(product_id="BULKY").update(low_stock_threshold=100)
    Stock.objects.filter(product_id="RARE").update(low_stock_threshold=2)
    alert_low_stock(created("BULKY", "RARE"))
    assert [m.subject for m in mail.outbox] == ["Low stock: BULKY (40 left)"]


def test_low_is_below_the_skus_own_threshold_else_the_setting(settings):
    settings.LOW_STOCK_THRESHOLD = 10
    for sku, available, own in [("BULKY", 40, 100), ("RARE", 3, 2), ("PLAIN", 9, None), ("EDGE", 10, None)]:
        product_with_stock(sku=sku, available=available)
        Stock.objects.filter(product_id=sku).update(low_stock_threshold=own)
    assert sorted(Stock.objects.low().values_list("product_id", "threshold")) == [("BULKY", 100), ("PLAIN", 10)]
    assert sorted(Stock.objects.not_low().values_list("product_id", flat=True)) == ["EDGE", "RARE"]
