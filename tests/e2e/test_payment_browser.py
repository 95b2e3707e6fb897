"""End to end in a real browser: a shopper pays on the payment provider's page, an order
manager ships the order in the admin and its payment is captured; a second order, paid
and then cancelled, has its payment voided and refunds nothing. A shipped order's unit
sent back: the shopper asks through the API, staff receive it on the return's receive
page, and the order's page and the dashboard show the refund and the points as money
and figures.

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

from inventory.models import Stock, StockMovement
from orders.handlers import capture_on_shipment, submit_requested_refund, void_on_cancellation
from orders.models import Order, OrderStatus, Payment, Refund, Return
from orders.services import mark_order_shipped
from outbox.models import OutboxEvent
from shop.handlers import award_points, take_back_refunded_points
from shop.models import LoyaltyEntry
from tests.e2e.test_admin_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, CSP, require_browser, watch_csp
from tests.factories import SHIPPING_ADDRESS, UserFactory, product_with_stock
from tests.helpers import consumer_event, wait_until

# The simulator's routes before the shop's, as config/urls.py adds them with DEBUG on.
urlpatterns = [path("dev/payment-provider/", include("config.dev_provider_urls")), path("", include("config.urls"))]

PASSWORD = "correct-horse-battery"
SKU = "E2E-TEAPOT"
PAY_PAGE = ARTIFACTS / "pay-page.png"
ADMIN_SHIPPED = ARTIFACTS / "admin-order-shipped.png"
ORDER_PAGE = ARTIFACTS / "order-page.png"
DASHBOARD = ARTIFACTS / "dashboard.png"

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


def log_in(page, base_url: str, staff) -> None:
    """Through the admin's real login form."""
    from playwright.sync_api import expect

    assert "script-src 'self'" in page.goto(f"{base_url}/admin/login/").headers[CSP]
    page.fill("#id_username", staff.username)
    page.fill("#id_password", PASSWORD)
    page.click("#login-form [type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(staff.username)


def ship_in_admin(base_url: str, staff, order_id: int) -> None:
    """Log in through the real form, select the order on the change list and run "mark shipped"."""
    from playwright.sync_api import expect

    with browser_page("admin-order-shipped-FAILED.png") as page:
        log_in(page, base_url, staff)

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


def receive_in_admin(base_url: str, staff, return_id: int) -> None:
    """Open the return from the list of those awaiting a decision, then its receive page:
    the one line back on sale (restock), and the refund it makes said as money."""
    from playwright.sync_api import expect

    with browser_page("return-received-FAILED.png") as page:
        log_in(page, base_url, staff)
        page.goto(f"{base_url}/admin/orders/return/?status__exact=REQUESTED")
        row = page.locator("#result_list tbody tr").filter(has=page.locator("th.field-id a", has_text=str(return_id)))
        expect(row.locator("td.field-lines_shown")).to_have_text(f"1 x {SKU}")
        row.locator("th.field-id a").click()
        page.wait_for_url(f"**/admin/orders/return/{return_id}/change/**")  # the list's filter kept in the query
        expect(page.locator("div.field-reason div.readonly")).to_have_text("too small")

        page.locator("ul.object-tools").get_by_role("link", name="Receive", exact=True).click()
        page.wait_for_url(f"**/admin/orders/return/{return_id}/receive/")
        page.select_option("select[name^=line_]", "restock")
        page.get_by_role("button", name="Receive", exact=True).click()
        page.wait_for_url(f"**/admin/orders/return/{return_id}/change/")
        expect(page.locator("ul.messagelist")).to_contain_text(
            f"Return {return_id}: received 1 x {SKU} (restock); refund of €12.50 requested."
        )
        expect(page.locator("div.field-status div.readonly")).to_have_text("Received")
        expect(page.locator("ul.object-tools")).not_to_contain_text("Receive")  # once


def look_at_order_and_dashboard(base_url: str, staff, order_id: int) -> None:
    """The order's page (its lines' counts, payment, refund and return as money, its events
    in order) and the dashboard, each screenshot whole."""
    from playwright.sync_api import expect

    with browser_page("order-page-FAILED.png") as page:
        log_in(page, base_url, staff)
        page.goto(f"{base_url}/admin/orders/order/{order_id}/change/")
        items = page.locator("#items-group tbody tr.has_original")
        for field, text in (
            ("quantity", "2"),
            ("price", "€12.50"),
            ("gross_shown", "€25.00"),
            ("shipped", "2"),
            ("returned", "1"),
            ("refunded", "1"),
            ("cancelled", "0"),
        ):
            expect(items.locator(f"td.field-{field}")).to_have_text(text)
        payment = page.locator("#payments-group tbody tr.has_original")
        expect(payment.locator("td.field-captured_shown")).to_have_text("€25.00")
        expect(payment.locator("td.field-refunded_shown")).to_have_text("€12.50")
        refund = page.locator("#refunds-group tbody tr.has_original")
        expect(refund.locator("td.field-amount_shown")).to_have_text("€12.50")
        expect(refund.locator("td.field-status")).to_have_text("Completed")
        expect(page.locator("#returns-group td.field-lines_shown")).to_have_text(f"1 x {SKU} (restock)")
        events = page.locator(".order-event")
        expect(events.first).to_contain_text("OrderCreated 2 x E2E-TEAPOT, €25.00")
        expect(events.filter(has_text="ReturnReceived")).to_contain_text(f"ReturnReceived 1 x {SKU} restock, €12.50")
        expect(events.last).to_contain_text("RefundCompleted €12.50 (return)")
        page.screenshot(path=str(ORDER_PAGE), full_page=True)

        page.goto(f"{base_url}/admin/dashboard/")
        expect(page.locator("#returns-requested")).to_have_text("0")
        expect(page.locator("#loyalty-earned-today")).to_have_text("25")
        expect(page.locator("#loyalty-taken-back-today")).to_have_text("12")
        page.screenshot(path=str(DASHBOARD), full_page=True)


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


def run_handler(handler, event_type: str, order_id: int) -> None:
    """What a consumer (payments, loyalty) does with the order's `event_type` event from the outbox."""
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
    run_handler(capture_on_shipment, "OrderShipped", shipped_id)
    assert payment_of(shipped_id).status == Payment.Status.CAPTURED

    # Paid, then cancelled before shipping: the payment is voided, nothing is refunded.
    cancelled_id, pay_url = check_out_and_start_payment(api, key="e2e-order-2")
    pay_in_browser(pay_url)
    assert payment_of(cancelled_id).status == Payment.Status.AUTHORIZED
    status, order = api.call("POST", f"/api/orders/{cancelled_id}/cancel")
    assert status == 200 and order["status"] == "CANCELLED", order
    run_handler(void_on_cancellation, "OrderCancelled", cancelled_id)
    assert payment_of(cancelled_id).status == Payment.Status.VOIDED
    assert not Refund.objects.filter(order_id=cancelled_id).exists()

    assert PAY_PAGE.stat().st_size > 0 and ADMIN_SHIPPED.stat().st_size > 0


@pytest.mark.django_db(transaction=True)
def test_staff_receive_a_returned_unit_in_the_browser_and_see_the_refund_as_money(live_server, redis, provider):
    product_with_stock(sku=SKU, name="Teapot", price=1250, available=10)
    manager = UserFactory(username="order-manager-e2e", is_staff=True, password=PASSWORD)
    manager.groups.add(order_managers_group())
    api = Api(live_server.url)
    register_shopper(api)

    # Paid on the provider's page, shipped, its money captured; its points earned.
    order_id, pay_url = check_out_and_start_payment(api, key="e2e-return-1")
    pay_in_browser(pay_url)
    mark_order_shipped(order_id=order_id)
    run_handler(capture_on_shipment, "OrderShipped", order_id)
    run_handler(award_points, "OrderPaid", order_id)
    assert payment_of(order_id).captured_amount == 2500

    # One unit sent back: the shopper asks, staff receive it in the admin.
    body = {"items": [{"sku": SKU, "quantity": 1}], "reason": "too small"}
    status, returned = api.call("POST", f"/api/orders/{order_id}/returns", body)
    assert status == 201 and returned["status"] == "REQUESTED", returned
    receive_in_admin(live_server.url, manager, returned["id"])
    assert Return.objects.get(id=returned["id"]).status == Return.Status.RECEIVED
    assert Stock.objects.get(product_id=SKU).available == 9  # 2 shipped, 1 back on sale
    assert StockMovement.objects.filter(product_id=SKU, reason=StockMovement.Reason.RETURNED, delta=1).exists()

    # The payments consumer submits the refund; the simulator confirms it through the webhook.
    refund = Refund.objects.get(order_id=order_id)
    assert (refund.amount, refund.reason, refund.created_by) == (1250, Refund.Reason.RETURN, manager)
    run_handler(submit_requested_refund, "RefundRequested", order_id)
    assert wait_until(lambda: Refund.objects.get(id=refund.id).status == Refund.Status.COMPLETED, 10)
    run_handler(take_back_refunded_points, "RefundCompleted", order_id)
    assert sorted(LoyaltyEntry.objects.filter(order_id=order_id).values_list("points", flat=True)) == [-12, 25]

    look_at_order_and_dashboard(live_server.url, manager, order_id)
    assert ORDER_PAGE.stat().st_size > 0 and DASHBOARD.stat().st_size > 0
