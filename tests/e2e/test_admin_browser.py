"""End to end in a real browser: a stock manager receives stock through the admin.

Headless Debian Chromium (/usr/bin/chromium, installed by `make test` through
scripts/install_browser.sh) driven by Playwright for Python against pytest-django's
live server. Playwright's own browser downloads are never used.

The database work happens before Playwright starts and after it stops: Playwright's
sync API runs an event loop in this thread, and Django refuses ORM calls while one runs.
"""

import importlib
import os
import threading
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission

from inventory.models import Stock, StockMovement
from tests.factories import UserFactory, product_with_stock

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"
SCREENSHOT = ARTIFACTS / "admin-stock-received.png"
PASSWORD = "correct-horse-battery"
SKU = "E2E-MUG"

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def stock_managers_group() -> Group:
    """The group from the data migration shop/0003_staff_groups.

    A transaction=True test runs on a database that earlier transactional tests may have
    flushed, which removes the migration's rows: then the group is rebuilt from the
    migration's own GROUPS dict, so the test grants exactly what production grants.
    """
    group = Group.objects.filter(name="Stock managers").first()
    if group is not None:
        return group
    grants = importlib.import_module("shop.migrations.0003_staff_groups").GROUPS["Stock managers"]
    group = Group.objects.create(name="Stock managers")
    for label, actions in grants.items():
        app_label, model = label.split(".")
        for action in actions:
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}")
            )
    return group


def require_browser():
    """Fail, never skip: `make test` installs Chromium, so a missing one is a broken setup."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser test needs Debian's chromium package. "
            "Run `bash scripts/install_browser.sh` (as root; `make test` runs it) and try again.",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(
            f"Playwright for Python is not installed ({error}): run `make install` "
            "or `.venv/bin/pip install -r requirements.txt`.",
            pytrace=False,
        )
    return sync_playwright


CSP = "content-security-policy"


def watch_csp(page) -> list[str]:
    """What the browser refuses under the pages' Content-Security-Policy, as it logs it."""
    violations: list[str] = []
    page.on("console", lambda message: "Content Security Policy" in message.text and violations.append(message.text))
    return violations


@pytest.mark.django_db(transaction=True)
def test_stock_manager_receives_stock_in_the_browser(live_server):
    sync_playwright = require_browser()
    from playwright.sync_api import expect

    product_with_stock(sku=SKU, name="Enamel mug", available=5)
    manager = UserFactory(username="stock-manager-e2e", is_staff=True, password=PASSWORD)
    manager.groups.add(stock_managers_group())
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(15_000)
            violations = watch_csp(page)
            try:
                # Log in through the real form.
                assert "script-src 'self'" in page.goto(f"{live_server.url}/admin/login/").headers[CSP]
                page.fill("#id_username", manager.username)
                page.fill("#id_password", PASSWORD)
                page.click("#login-form [type=submit]")
                expect(page.locator("#user-tools")).to_contain_text(manager.username)

                # The change list, then the SKU's row.
                page.goto(f"{live_server.url}/admin/inventory/stock/")
                sku_link = page.locator("th.field-product_id a").get_by_text(SKU, exact=True)
                row = page.locator("#result_list tbody tr").filter(has=sku_link)
                expect(row).to_have_count(1)
                expect(row.locator("td.field-available")).to_have_text("5")
                row.locator("th.field-product_id a").click()
                page.wait_for_url(f"**/admin/inventory/stock/{SKU}/change/")

                # Receive 7 through the change form.
                page.select_option("select[name=operation]", "receive")
                page.fill("input[name=quantity]", "7")
                page.fill("input[name=note]", "delivery checked in the browser test")
                page.click("input[name=_save]")

                # Back on the change list, with the new figure in the SKU's row.
                page.wait_for_url("**/admin/inventory/stock/")
                expect(page.locator("ul.messagelist")).to_contain_text(f"{SKU}: now 12 available")
                expect(row.locator("td.field-available")).to_have_text("12")
                page.screenshot(path=str(SCREENSHOT), full_page=True)
                assert violations == []
            except Exception:
                try:  # what the browser showed when it went wrong; the original error still wins
                    page.screenshot(path=str(ARTIFACTS / "admin-stock-received-FAILED.png"), full_page=True)
                except Exception:
                    pass
                raise
        finally:
            browser.close()

    stock = Stock.objects.get(product_id=SKU)
    assert stock.available == 12
    assert stock.reserved == 0
    movement = StockMovement.objects.filter(product_id=SKU, created_by=manager).get()
    assert movement.delta == 7
    assert movement.reason == StockMovement.Reason.RECEIVED
    assert SCREENSHOT.stat().st_size > 0


@pytest.mark.django_db(transaction=True)
def test_staff_watch_the_dashboard_and_a_live_flash_sale(live_server, redis):
    """An order manager opens the dashboard from the admin index, then a flash
    sale's live page, which refreshes itself when an order comes in."""
    sync_playwright = require_browser()
    from playwright.sync_api import expect

    from inventory.services.flash_sales import seed_flash_sale
    from orders.services import place_order
    from tests.helpers import fill_cart

    seed_flash_sale(sku="E2E-FLASH", stock=10, price=100, name="Flash item")
    staff = UserFactory(username="watcher-e2e", is_staff=True, is_superuser=True, password=PASSWORD)
    shopper = UserFactory()
    fill_cart(redis, shopper.id, {"E2E-FLASH": 3})
    ARTIFACTS.mkdir(exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            violations = watch_csp(page)
            page.goto(f"{live_server.url}/admin/login/")
            page.fill("#id_username", staff.username)
            page.fill("#id_password", PASSWORD)
            page.click("#login-form [type=submit]")
            page.click("#dashboard-link a")
            page.wait_for_url("**/admin/dashboard/")
            expect(page.locator("#orders-chart rect")).to_have_count(60)
            page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)

            page.goto(f"{live_server.url}/admin/flash-sales/E2E-FLASH/live/")
            expect(page.locator("#gate_remaining")).to_have_text("10")
            # An order placed meanwhile, from another thread (this one runs Playwright's loop).
            ordering = threading.Thread(target=lambda: place_order(customer_id=shopper.id, idempotency_key="e2e"))
            ordering.start()
            ordering.join()
            expect(page.locator("#gate_remaining")).to_have_text("7", timeout=10_000)  # refreshed in place
            expect(page.locator("#orders_last_minute")).to_have_text("1")
            page.screenshot(path=str(ARTIFACTS / "admin-flash-sale-live.png"), full_page=True)
            assert violations == []  # the live page's script and the chart's style come from files
        finally:
            browser.close()
    assert (ARTIFACTS / "admin-dashboard.png").stat().st_size > 0
    assert (ARTIFACTS / "admin-flash-sale-live.png").stat().st_size > 0
