"""The staff dashboard and the live flash-sale page (config/dashboard.py, config/admin.py)."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from config.dashboard import bars, dashboard, live_flash_sale
from inventory.services.flash_sales import seed_flash_sale
from orders.models import Order, OrderStatus
from orders.services import place_order
from tests.factories import OrderFactory, UserFactory
from tests.helpers import fill_cart, refuse_every_way, staff_client, wall_clock_back_to_midday

pytestmark = pytest.mark.django_db


def test_todays_figures_and_the_last_hour():
    now = timezone.localtime().replace(hour=12, minute=30)  # midday: "today" holds every order below
    OrderFactory(status=OrderStatus.PAID, total_amount=2500, created_at=now)
    OrderFactory(status=OrderStatus.PENDING_PAYMENT, total_amount=999, created_at=now)
    OrderFactory(status=OrderStatus.SHIPPED, total_amount=500, created_at=now - timedelta(minutes=5))
    OrderFactory(status=OrderStatus.PAID, total_amount=7, created_at=now - timedelta(days=2))  # not today
    figures = dashboard(now=now)
    assert figures["today"]["orders"] == 3
    assert figures["today"]["paid"] == 2 and figures["today"]["revenue"] == 3000
    assert figures["today"]["revenue_shown"] == "€30.00"
    assert figures["today"]["paid_rate"] == pytest.approx(2 / 3)
    chart = figures["chart"]
    assert len(chart["bars"]) == 60 and chart["top"] == 2
    assert chart["bars"][-1].value == 2 and chart["bars"][-6].value == 1
    assert chart["bars"][-1].label == f"{now:%H:%M}: 2 orders"
    assert chart["bars"][-1].height == chart["height"] and chart["bars"][0].height == 0


def test_bars_scale_to_the_top_value():
    chart = bars([(timezone.now(), 0), (timezone.now(), 5), (timezone.now(), 10)], width=300, height=100)
    assert [b.height for b in chart["bars"]] == [0, 50, 100] and [b.x for b in chart["bars"]] == [0, 100, 200]


def test_bars_tick_the_axes():
    start = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    series = [(start + timedelta(minutes=i), i % 7) for i in range(30)]
    chart = bars(series, width=300, height=60, every=10)
    assert [(t.label, t.at) for t in chart["y_ticks"]] == [("0", 60), ("3", 30), ("6", 0)]
    assert [(t.label, t.at) for t in chart["x_ticks"]] == [("12:00", 4.0), ("12:10", 104.0), ("12:20", 204.0)]
    assert [b.center for b in chart["bars"][:2]] == [4.0, 14.0]


def test_the_dashboards_chart_labels_its_axes_and_each_bar():
    now = timezone.now()
    OrderFactory(created_at=now)
    OrderFactory(created_at=now)
    OrderFactory(created_at=now - timedelta(minutes=1))
    response = staff_client("Order managers").get("/admin/dashboard/")
    shown = response.context["chart"]["bars"]  # the minutes as the page drew them (a minute may have turned)
    body = response.content.decode()
    start = body.index('<svg id="orders-chart"')
    chart = body[start : body.index("</svg>", start)]
    assert "style=" not in chart and "<script" not in body.split('id="dashboard"')[1]  # the CSP allows none inline
    assert ">orders</text>" in chart and ">minute (UTC)</text>" in chart  # the axes' titles
    for tick in ("0", "1", "2"):  # the y axis: 0, half the top, the top
        assert f'text-anchor="end">{tick}</text>' in chart
    for bar in shown[::10]:  # the x axis, every 10 minutes
        assert f'text-anchor="middle">{bar.minute}</text>' in chart
    values = [int(value) for value in re.findall(r'<text class="bar-value[^"]*"[^>]*>(\d+)</text>', chart)]
    assert len(values) == 60 and values == [bar.value for bar in shown]  # each bar's value, oldest first
    assert sorted(value for value in values if value) == [1, 2]
    assert f"<title>{now:%H:%M}: 2 orders</title>" in chart


@pytest.mark.parametrize("group", ["Stock managers", "Order managers"])
def test_staff_of_either_group_see_the_dashboard_and_its_refunds(group, monkeypatch):
    wall_clock_back_to_midday(monkeypatch)  # the order below and the page's "today" are one day
    client = staff_client(group)
    OrderFactory(status=OrderStatus.PAID, total_amount=1234)
    response = client.get("/admin/dashboard/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="orders-chart"' in body and body.count("<rect") == 60
    assert '<td id="revenue-today">€12.34</td>' in body and "cents" not in body
    assert 'id="refunds-failed"' in body and "?status__exact=FAILED" in body
    assert 'href="/admin/dashboard/"' in client.get("/admin/").content.decode()


def test_the_dashboard_needs_staff(api_client):
    assert staff_client().get("/admin/dashboard/").status_code == 200
    response = api_client.get("/admin/dashboard/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@pytest.mark.slow
def test_the_dashboard_makes_a_bounded_number_of_queries_at_100000_orders(django_assert_max_num_queries, monkeypatch):
    client = staff_client("Order managers")
    customer = UserFactory()
    now = wall_clock_back_to_midday(monkeypatch)  # the two hours of orders below are all today's
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO orders (customer_id, idempotency_key, request_hash, status, total_amount, currency, "
            "expires_at, created_at) SELECT %s, 'k' || g, 'h', "
            "CASE WHEN g %% 3 = 0 THEN 'PAID' ELSE 'PENDING_PAYMENT' END, 1000, 'EUR', %s, "
            "%s - (g %% 120) * interval '1 minute' FROM generate_series(1, 100000) g",
            [customer.id, now, now],
        )
    with django_assert_max_num_queries(12):  # session, user, the dashboard's eight and the admin's two (12 measured)
        response = client.get("/admin/dashboard/")
    assert response.status_code == 200
    figures = response.context["today"]
    assert (figures["orders"], figures["paid"]) == (100_000, 33_333)


def test_the_live_flash_sale_page_and_its_figures(redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # the gate's counter is set on commit
        seed_flash_sale(sku="LIVE-1", stock=20, price=100, name="Live item")
    client = staff_client("Stock managers")
    page = client.get("/admin/flash-sales/LIVE-1/live/")
    assert page.status_code == 200 and 'id="gate_remaining">20<' in page.content.decode()
    assert '<script src="/static/shop/flash_sale_live.js">' in page.content.decode()  # no inline script (CSP)
    policy = page["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    shopper = UserFactory()
    fill_cart(redis, shopper.id, {"LIVE-1": 2})
    place_order(customer_id=shopper.id, idempotency_key="live")
    figures = client.get("/admin/flash-sales/LIVE-1/live.json").json()
    assert figures["gate_remaining"] == 18 and figures["available"] == 18 and figures["reserved"] == 2
    assert figures["orders_last_minute"] == 1 and figures["mode"] == "direct" and figures["queue_depth"] is None
    assert len(figures["per_minute"]) == 15
    assert (figures["refused_sold_out"], figures["refused_limit_reached"], figures["refused_rate_limited"]) == (0, 0, 0)
    assert client.get("/admin/flash-sales/NOPE/live.json").status_code == 404
    assert 'href="/admin/flash-sales/LIVE-1/live/"' in client.get("/admin/inventory/flashsale/").content.decode()


def test_orders_in_the_last_minute_are_the_last_60_seconds(redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="LIVE-3", stock=20, price=100, name="Live item")
    shopper = UserFactory()
    fill_cart(redis, shopper.id, {"LIVE-3": 1})
    place_order(customer_id=shopper.id, idempotency_key="clock")
    placed = timezone.now().replace(second=50, microsecond=0)
    Order.objects.filter(idempotency_key="clock").update(created_at=placed)
    # 15 s later the clock minute has turned: the order is still in the last minute.
    assert live_flash_sale(sku="LIVE-3", now=placed + timedelta(seconds=15))["orders_last_minute"] == 1
    assert live_flash_sale(sku="LIVE-3", now=placed + timedelta(seconds=61))["orders_last_minute"] == 0


def test_refusals_are_counted_by_reason(redis, settings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        seed_flash_sale(sku="LIVE-2", stock=2, price=100, name="Live item", per_customer_limit=1)
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "checkout": "1/min"}
    outcomes = refuse_every_way(redis, "LIVE-2")
    assert outcomes == ["limit_reached", "ordered", "sold_out", "rate_limited"]
    figures = staff_client().get("/admin/flash-sales/LIVE-2/live.json").json()
    assert (figures["refused_limit_reached"], figures["refused_sold_out"], figures["refused_rate_limited"]) == (1, 1, 1)
