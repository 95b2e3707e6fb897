"""End to end in a real browser: a shopper pays on the payment provider's page, an order
manager ships the order in the admin and its payment is captured; a second order, paid
and then cancelled, has its payment voided and refunds nothing.

The provider is the development simulator (config/dev_provider.py), mounted on the live
server as `make run` mounts it: the shop calls it over HTTP and its pay page sends the
signed webhook back to the live server. The shopper's side is the JSON API over HTTP;
the `payments` consumer's part is its handler run on the event in the outbox, as the
consumer would receive it.

Browser and database take turns, as in test_admin_browser.py: Django refuses ORM calls
while Playwright's event loop runs, so each browser session is opened and closed between them.
"""

import importlib
import json
from contextlib import contextmanager

import pytest
import urllib3
from django.contrib.auth.models import Group, Permission
from django.db import connections
from django.urls import include, path

from orders.handlers import capture_on_shipment, void_on_cancellation
from orders.models import Order, OrderStatus, Payment, Refund
from outbox.models import OutboxEvent
from tests.e2e.test_admin_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, CSP, require_browser, watch_csp
from tests.factories import SHIPPING_ADDRESS, UserFactory, product_with_stock
from tests.helpers import consumer_event

# The simulator's routes before the shop's, as config/urls.py adds them with DEBUG on.
urlpatterns = [path("dev/payment-provider/", include("config.dev_provider_urls")), path("", include("config.urls"))]

PASSWORD = "correct-horse-battery"
SKU = "E2E-TEAPOT"
PAY_PAGE = ARTIFACTS / "pay-page.png"
ADMIN_SHIPPED = ARTIFACTS / "admin-order-shipped.png"

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture
def provider(settings, live_server, monkeypatch):
    """The simulator on the live server, which runs in this process and so reads these settings."""
    # The shop's and the simulator's HTTP clients keep their connections to the live server
    # alive, and the thread serving one would keep its database session for CONN_MAX_AGE:
    # still open when the test database is dropped. Closed after each request instead.
    monkeypatch.setitem(connections["default"].settings_dict, "CONN_MAX_AGE", 0)
    settings.ROOT_URLCONF = __name__  # the setting_changed signal clears the URL caches
    settings.PAYMENT_PROVIDER_URL = f"{live_server.url}/dev/payment-provider"
    settings.DEV_PROVIDER_WEBHOOK_URL = f"{live_server.url}/api/payments/webhook"
    settings.DEV_PROVIDER_FAILURE = ""
    settings.PAYMENT_CAPTURE = "on_shipment"  # the session asks for a manual capture: the shop captures on shipping


# --- the shopper, through the JSON API ------------------------------------------------------


class Api:
    """The shop's JSON API over HTTP, as a shopper's app calls it (with their token once registered)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.token = ""

    def call(self, method: str, path: str, body: dict | None = None, **headers) -> tuple[int, dict | None]:
        headers = {"Content-Type": "application/json", **headers}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        data = None if body is None else json.dumps(body).encode()
        response = urllib3.request(method, f"{self.base_url}{path}", body=data, headers=headers, retries=False)
        return response.status, json.loads(response.data) if response.data else None


def register_shopper(api: Api) -> None:
    account = {"username": "shopper-e2e", "password": PASSWORD, "email": "shopper-e2e@example.com"}
    status, answer = api.call("POST", "/api/auth/register", account)
    assert status == 201, answer
    api.token = answer["token"]
    status, answer = api.call("PUT", "/api/auth/me/address", SHIPPING_ADDRESS)
    assert status == 200, answer


def check_out_and_start_payment(api: Api, *, key: str) -> tuple[int, str]:
    """Two of SKU in the cart, checked out under `key`, its payment started: (order id, pay_url)."""
    status, cart = api.call("PUT", f"/api/cart/items/{SKU}", {"quantity": 2})
    assert status == 200 and cart["total"] == 2500, cart
    status, order = api.call("POST", "/api/orders", **{"Idempotency-Key": key})
    assert status == 201 and order["status"] == "PENDING_PAYMENT" and order["total"] == 2500, order
    status, session = api.call("POST", f"/api/orders/{order['id']}/payment")
    assert status == 201 and session["amount"] == 2500 and session["currency"] == "EUR", session
    assert session["pay_url"].startswith(f"{api.base_url}/dev/payment-provider/pay/"), session
    return order["id"], session["pay_url"]


# --- in the browser ---------------------------------------------------------------------------


@contextmanager
def browser_page(failure_screenshot: str):
    """A page of headless Chromium; on an error, a screenshot of what it showed (the error still
    wins); on success, no Content-Security-Policy violation logged meanwhile."""
    sync_playwright = require_browser()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(15_000)
            violations = watch_csp(page)
            try:
                yield page
            except Exception:
                try:
                    page.screenshot(path=str(ARTIFACTS / failure_screenshot), full_page=True)
                except Exception:
                    pass
                raise
            assert violations == [], violations
        finally:
            browser.close()


def pay_in_browser(pay_url: str, *, screenshot=None) -> None:
    """Open the provider's pay page, check what it shows and click Pay."""
    from playwright.sync_api import expect

    with browser_page("pay-page-FAILED.png") as page:
        assert "script-src 'self'" in page.goto(pay_url).headers[CSP]
        expect(page.locator(".amount")).to_have_text("€25.00")  # 2 x 12.50
        pay = page.get_by_role("button", name="Pay", exact=True)
        expect(pay).to_be_visible()
        expect(page.get_by_role("button", name="Decline", exact=True)).to_be_visible()
        if screenshot:
            page.screenshot(path=str(screenshot), full_page=True)
        pay.click()
        # The page answers once the shop has taken the webhook.
        expect(page.locator("h1")).to_have_text("Payment authorized")
        expect(page.locator("li")).to_have_text("authorized: the shop answered HTTP 200")


def ship_in_admin(base_url: str, staff, order_id: int) -> None:
    """Log in through the real form, select the order on the change list and run "mark shipped"."""
    from playwright.sync_api import expect

    with browser_page("admin-order-shipped-FAILED.png") as page:
        assert "script-src 'self'" in page.goto(f"{base_url}/admin/login/").headers[CSP]
        page.fill("#id_username", staff.username)
        page.fill("#id_password", PASSWORD)
        page.click("#login-form [type=submit]")
        expect(page.locator("#user-tools")).to_contain_text(staff.username)

        page.goto(f"{base_url}/admin/orders/order/")
        checkbox = page.locator(f"input.action-select[value='{order_id}']")
        row = page.locator("#result_list tbody tr").filter(has=checkbox)
        expect(row.locator("td.field-status")).to_have_text("Paid")
        checkbox.check()
        page.select_option("select[name=action]", "mark_shipped")
        page.click("button[name=index]")  # Go

        expect(page.locator("ul.messagelist")).to_contain_text(f"Order {order_id}: shipped.")
        expect(row.locator("td.field-status")).to_have_text("Shipped")
        page.screenshot(path=str(ADMIN_SHIPPED), full_page=True)


# --- in the database -------------------------------------------------------------------------


def order_managers_group() -> Group:
    """The group the data migrations shop/0003 and 0004 grant. A transaction=True test runs on a
    database that earlier transactional tests may have flushed, which removes the migrations'
    rows: then the group is rebuilt from their own grants, so the test grants what production does."""
    group = Group.objects.filter(name="Order managers").first()
    if group is not None:
        return group
    group = Group.objects.create(name="Order managers")
    grants = [
        importlib.import_module("shop.migrations.0003_staff_groups").GROUPS["Order managers"],
        importlib.import_module("shop.migrations.0004_staff_groups_notifications_loyalty").GRANTS["Order managers"],
    ]
    for label, actions in (item for grant in grants for item in grant.items()):
        app_label, model = label.split(".")
        for action in actions:
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}")
            )
    return group


def run_payments_handler(handler, event_type: str, order_id: int) -> None:
    """What the `payments` consumer does with the order's `event_type` event from the outbox."""
    event = OutboxEvent.objects.get(event_type=event_type, aggregate_type="order", aggregate_id=str(order_id))
    handler(consumer_event(event_type, **event.payload))


def payment_of(order_id: int) -> Payment:
    return Payment.objects.get(order_id=order_id)


@pytest.mark.django_db(transaction=True)
def test_shopper_pays_in_the_browser_then_shipping_captures_and_cancelling_voids(live_server, redis, provider):
    product_with_stock(sku=SKU, name="Teapot", price=1250, available=10)
    manager = UserFactory(username="order-manager-e2e", is_staff=True, password=PASSWORD)
    manager.groups.add(order_managers_group())
    api = Api(live_server.url)
    register_shopper(api)

    # Paid on the provider's page: the money is only held.
    shipped_id, pay_url = check_out_and_start_payment(api, key="e2e-order-1")
    pay_in_browser(pay_url, screenshot=PAY_PAGE)
    assert Order.objects.get(id=shipped_id).status == OrderStatus.PAID
    assert payment_of(shipped_id).status == Payment.Status.AUTHORIZED

    # Shipped in the admin: the payments consumer captures it.
    ship_in_admin(live_server.url, manager, shipped_id)
    assert Order.objects.get(id=shipped_id).status == OrderStatus.SHIPPED
    run_payments_handler(capture_on_shipment, "OrderShipped", shipped_id)
    assert payment_of(shipped_id).status == Payment.Status.CAPTURED

    # Paid, then cancelled before shipping: the payment is voided, nothing is refunded.
    cancelled_id, pay_url = check_out_and_start_payment(api, key="e2e-order-2")
    pay_in_browser(pay_url)
    assert payment_of(cancelled_id).status == Payment.Status.AUTHORIZED
    status, order = api.call("POST", f"/api/orders/{cancelled_id}/cancel")
    assert status == 200 and order["status"] == "CANCELLED", order
    run_payments_handler(void_on_cancellation, "OrderCancelled", cancelled_id)
    assert payment_of(cancelled_id).status == Payment.Status.VOIDED
    assert not Refund.objects.filter(order_id=cancelled_id).exists()

    assert PAY_PAGE.stat().st_size > 0 and ADMIN_SHIPPED.stat().st_size > 0
