"""orders/admin/ and the dashboard, issue 30: an order's lines with their counts,
its payments, refunds and returns as money, its events as a timeline; staff giving
money back (goodwill) and removing lines through forms; returns approved, rejected
and received in the admin, with the stock ledger and the refund they make."""

import html
import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from inventory.models import Stock, StockMovement
from orders.models import Order, OrderItem, Payment, Refund, Return, ReturnLine
from orders.services import (
    ReturnLineRequest,
    approve_return,
    mark_order_shipped,
    receive_return,
    refund_goodwill,
    remove_order_lines,
    request_return,
)
from orders.services.payments import capture_payment
from shop.models import LoyaltyEntry
from tests.factories import UserFactory, product_with_stock
from tests.helpers import place_pending_order, staff_client, wall_clock_back_to_midday
from tests.orders.test_admin_payments import said
from tests.orders.test_payment_lifecycle import authorize
from tests.orders.test_returns import ship

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(redis):
    """A pending order of 2 x "A" at 1,250 and 1 x "B" at 500 (10 of each in stock): €30.00."""
    product_with_stock(sku="A", price=1250, available=10)
    product_with_stock(sku="B", price=500, available=10)
    return place_pending_order(redis, UserFactory(), {"A": 2, "B": 1})


def captured(order) -> Payment:
    """Paid, its money taken at once (immediate capture): PAID, not shipped."""
    return authorize(order, f"pay_{order.id}", status="succeeded")


def shipped(order) -> Payment:
    """Paid (authorized), then shipped: its money captured first."""
    return ship(order, payment_id=f"pay_{order.id}")


def return_of(order, **units) -> Return:
    lines = [ReturnLineRequest(sku=sku, quantity=quantity) for sku, quantity in units.items()]
    return request_return(customer_id=order.customer_id, order_id=order.id, lines=lines, reason="too small")


def order_page(client, order) -> str:
    response = client.get(f"/admin/orders/order/{order.id}/change/")
    assert response.status_code == 200
    return response.content.decode()


def inline(page: str, name: str) -> str:
    """One inline of the order page: items, payments, refunds or returns."""
    start = page.index(f'id="{name}-group"')
    return page[start : page.index("</fieldset>", start)]


def column(html: str, field: str) -> list[str]:
    """The cells of a read-only inline's column, as text, row by row."""
    cells = re.findall(rf'<td class="field-{field}">\s*<p>(.*?)</p>', html, re.S)
    return [" ".join(cell.split()) for cell in cells]


def timeline(page: str) -> list[str]:
    """The order's events as the page lists them: "when · what · published or waiting", oldest first."""
    events = re.findall(r'<div class="order-event">(.*?)</div>', page, re.S)
    return [" ".join(html.unescape(event).split()) for event in events]


def post(client, url: str, data: dict):
    return client.post(url, data, follow=True)


# --- the order page -----------------------------------------------------------------------------------------


def test_order_page_shows_each_lines_counts_money_returns_refunds_and_the_timeline(order_manager, provider, order):
    payment = shipped(order)
    returned = return_of(order, A=1)
    receive_return(return_id=returned.id, conditions={"A": "restock"})
    refund_goodwill(order_id=order.id, amount=299, note="late delivery")
    page = order_page(order_manager, order)

    items = inline(page, "items")
    assert [re.sub("<[^>]+>", "", cell).split()[0] for cell in column(items, "product")] == ["A", "B"]
    assert column(items, "price") == ["€12.50", "€5.00"] and column(items, "gross_shown") == ["€25.00", "€5.00"]
    assert column(items, "discount_off") == ["€0.00", "€0.00"]
    counts = [column(items, name) for name in ("quantity", "cancelled", "shipped", "returned", "refunded")]
    assert counts == [["2", "1"], ["0", "0"], ["2", "1"], ["1", "0"], ["1", "0"]]  # A, B

    payments = inline(page, "payments")
    assert column(payments, "amount_shown") == ["€30.00"] and column(payments, "captured_shown") == ["€30.00"]
    assert column(payments, "refunded_shown") == ["€15.49"]  # 12.50 for the return, 2.99 of goodwill

    refunds = inline(page, "refunds")
    assert column(refunds, "amount_shown") == ["€2.99", "€12.50"]  # newest first
    assert column(refunds, "reason") == ["Goodwill refund by staff", "Returned items received"]
    assert column(refunds, "note") == ["late delivery", "-"]
    assert column(refunds, "lines_shown") == ["-", "1 x A (€12.50)"]

    returns = inline(page, "returns")
    assert column(returns, "return_link") == [
        f'<a href="/admin/orders/return/{returned.id}/change/">Return {returned.id}</a>'
    ]
    assert column(returns, "status") == ["Received"] and column(returns, "lines_shown") == ["1 x A (restock)"]
    assert column(returns, "reason") == ["too small"] and column(returns, "refund_shown") == ["€12.50"]

    what = [event.split(" · ")[1] for event in timeline(page)]
    assert what == [
        "OrderCreated 2 x A, 1 x B, €30.00",
        f"OrderPaid €30.00, {payment.provider_payment_id}",
        f"PaymentAuthorized €30.00, {payment.provider_payment_id}",
        f"PaymentCaptured €30.00, {payment.provider_payment_id}",
        "OrderShipped 2 x A, 1 x B",
        f"ReturnRequested 1 x A, “too small”, return {returned.id}",
        "RefundRequested €12.50 (return), 1 x A",
        f"ReturnReceived 1 x A restock, €12.50 refunded, return {returned.id}",
        "RefundRequested €2.99 (goodwill)",
    ]
    assert all(event.endswith("waiting (0 attempts)") for event in timeline(page))  # no relay ran
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d · ", timeline(page)[0])
    assert ">1250<" not in page and ">3000<" not in page


def test_an_unshipped_order_shows_no_shipped_units_and_its_forms_only_to_order_managers(order_manager, provider, order):
    authorize(order)
    page = order_page(order_manager, order)
    assert column(inline(page, "items"), "shipped") == ["-", "-"]
    assert f'href="/admin/orders/order/{order.id}/goodwill-refund/">Refund an amount (goodwill)</a>' in page
    assert f'href="/admin/orders/order/{order.id}/remove-lines/">Remove lines</a>' in page

    viewer = staff_client()
    viewer.user.user_permissions.add(Permission.objects.get(codename="view_order"))
    page = order_page(viewer, order)
    assert "goodwill-refund/" not in page and "remove-lines/" not in page
    assert viewer.get(f"/admin/orders/order/{order.id}/goodwill-refund/").status_code == 403

    mark_order_shipped(order_id=order.id)
    page = order_page(order_manager, order)
    assert "goodwill-refund/" in page and "remove-lines/" not in page  # lines go only before shipping


# --- goodwill ---------------------------------------------------------------------------------------------


def test_goodwill_form_refunds_the_amount_typed_and_says_it_as_money(order_manager, provider, order):
    captured(order)
    url = f"/admin/orders/order/{order.id}/goodwill-refund/"
    form = order_manager.get(url).content.decode()
    assert "minor units (cents): 1299 = €12.99" in form and "up to €30.00 can be given back" in form
    assert 'name="csrfmiddlewaretoken"' in form and 'name="amount"' in form and 'name="note"' in form
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(order_manager.user)
    assert strict.post(url, {"amount": "1299", "note": "forged"}).status_code == 403  # no CSRF token

    done = post(order_manager, url, {"amount": "1299", "note": "late delivery"})
    assert done.redirect_chain == [(f"/admin/orders/order/{order.id}/change/", 302)]
    assert said(done) == [("success", f"Order {order.id}: goodwill refund of €12.99 requested.")]
    refund = Refund.objects.get(order=order)
    assert (refund.amount, refund.reason, refund.note) == (1299, Refund.Reason.GOODWILL, "late delivery")
    assert refund.created_by == order_manager.user and refund.lines == []
    assert Payment.objects.get(order=order).refunded_amount == 1299


def test_goodwill_past_what_is_left_or_before_the_capture_is_refused_with_a_message(order_manager, provider, order):
    url = f"/admin/orders/order/{order.id}/goodwill-refund/"
    authorize(order)  # held, not taken
    held = post(order_manager, url, {"amount": "100", "note": "sorry"})
    assert held.status_code == 200 and held.redirect_chain == []
    [(level, message)] = said(held)
    assert level == "error" and message.startswith(f"Order {order.id}: The order's payment is not captured")

    payment = Payment.objects.get(order=order)
    assert capture_payment(payment=payment)
    refund_goodwill(order_id=order.id, amount=1000, note="first")
    over = post(order_manager, url, {"amount": "2001", "note": "too much"})
    assert over.status_code == 200
    assert said(over) == [
        (
            "error",
            f"Order {order.id}: The refunds of this payment would exceed what was "
            "captured. €20.00 can still be refunded.",
        )
    ]
    for invalid in ({"amount": "0", "note": "x"}, {"amount": "12.99", "note": "x"}, {"amount": "100", "note": ""}):
        refused = post(order_manager, url, invalid)
        assert refused.status_code == 200 and said(refused) == [] and refused.context["form"].errors, invalid
    assert list(Refund.objects.values_list("note", flat=True)) == ["first"]


def test_a_stock_manager_can_open_none_of_the_order_forms(stock_manager, provider, order):
    captured(order)
    for url in (f"/admin/orders/order/{order.id}/goodwill-refund/", f"/admin/orders/order/{order.id}/remove-lines/"):
        assert stock_manager.get(url).status_code == 403
        assert stock_manager.post(url, {"amount": "100", "note": "x"}).status_code == 403
    assert not Refund.objects.exists() and Order.objects.get(id=order.id).total_amount == 3000


# --- removing lines ---------------------------------------------------------------------------------------


def test_remove_lines_form_takes_units_off_and_the_total_drops(order_manager, provider, order):
    authorize(order)  # held: the capture takes the new total later
    a, b = OrderItem.objects.filter(order=order).order_by("product_id")
    url = f"/admin/orders/order/{order.id}/remove-lines/"
    form = order_manager.get(url).content.decode()
    assert f'name="units_{a.id}"' in form and f'name="units_{b.id}"' in form and "2 ordered at €12.50" in form

    done = post(order_manager, url, {f"units_{a.id}": "0", f"units_{b.id}": "1"})
    assert done.redirect_chain == [(f"/admin/orders/order/{order.id}/change/", 302)]
    assert said(done) == [("success", f"Order {order.id}: removed 1 x B (€5.00 off), the total is now €25.00.")]
    assert Order.objects.get(id=order.id).total_amount == 2500 and OrderItem.objects.get(id=b.id).cancelled == 1
    assert Stock.objects.get(product_id="B").available == 10  # back on sale
    page = done.content.decode()
    assert column(inline(page, "items"), "cancelled") == ["0", "1"]
    assert any(" · OrderLinesCancelled 1 x B, €5.00, total now €25.00 · " in event for event in timeline(page))


def test_remove_lines_of_a_captured_order_refunds_them(order_manager, provider, order):
    captured(order)
    a = OrderItem.objects.get(order=order, product_id="A")
    done = post(order_manager, f"/admin/orders/order/{order.id}/remove-lines/", {f"units_{a.id}": "1"})
    assert said(done) == [
        (
            "success",
            f"Order {order.id}: removed 1 x A (€12.50 off), the total is now €17.50; a refund of €12.50 requested.",
        )
    ]
    refund = Refund.objects.get(order=order)
    assert (refund.amount, refund.reason) == (1250, Refund.Reason.LINES_CANCELLED)


def test_remove_lines_refusals_are_messages_or_form_errors_and_change_nothing(order_manager, provider, order):
    authorize(order)
    a, b = OrderItem.objects.filter(order=order).order_by("product_id")
    url = f"/admin/orders/order/{order.id}/remove-lines/"
    every = post(order_manager, url, {f"units_{a.id}": "2", f"units_{b.id}": "1"})
    assert every.status_code == 200 and every.redirect_chain == []
    assert said(every) == [
        (
            "error",
            f"Order {order.id}: Only units the paid, unshipped order still has can be "
            "removed, and not all of them: cancel the order.",
        )
    ]
    nothing = post(order_manager, url, {f"units_{a.id}": "0", f"units_{b.id}": "0"})
    assert "Give the units to remove of at least one line." in nothing.content.decode() and said(nothing) == []
    too_many = post(order_manager, url, {f"units_{a.id}": "3", f"units_{b.id}": "0"})
    assert too_many.context["form"].errors == {f"units_{a.id}": ["Ensure this value is less than or equal to 2."]}
    assert Order.objects.get(id=order.id).total_amount == 3000
    assert not OrderItem.objects.filter(order=order, cancelled__gt=0).exists()

    remove_order_lines(order_id=order.id, lines={"B": 1})
    gone = post(order_manager, url, {f"units_{b.id}": "1"})  # a stale form: the last unit of B went meanwhile
    assert said(gone) == [
        (
            "error",
            f"Order {order.id}: Only units the paid, unshipped order still has can be "
            "removed, and not all of them: cancel the order. B: 0 unit(s) can still be "
            "removed.",
        )
    ]

    mark_order_shipped(order_id=order.id)
    late = post(order_manager, url, {f"units_{a.id}": "1"})
    assert late.redirect_chain == [(f"/admin/orders/order/{order.id}/change/", 302)]
    assert said(late) == [
        ("warning", f"Order {order.id}: only a paid order that has not shipped can lose lines; it is Shipped.")
    ]
    assert Order.objects.get(id=order.id).total_amount == 2500


# --- returns ----------------------------------------------------------------------------------------------


def decide(client, action: str, *returns):
    data = {"action": action, "_selected_action": [r.id for r in returns]}
    return client.post("/admin/orders/return/", data, follow=True)


def test_return_list_shows_order_lines_and_refund_as_money_and_filters_by_status(order_manager, provider, order):
    shipped(order)
    received = return_of(order, A=1)
    receive_return(return_id=received.id, conditions={"A": "damaged"})
    open_ = return_of(order, A=1, B=1)
    listing = order_manager.get("/admin/orders/return/").content.decode()
    link = f'<a href="/admin/orders/order/{order.id}/change/">Order {order.id}</a>'
    assert f'<td class="field-order_link">{link}</td>' in listing
    assert '<td class="field-lines_shown">1 x A (damaged)</td>' in listing
    assert '<td class="field-lines_shown">1 x A, 1 x B</td>' in listing
    assert '<td class="field-refund_shown">€12.50</td>' in listing
    assert '<td class="field-refund_shown">-</td>' in listing
    requested = order_manager.get("/admin/orders/return/?status__exact=REQUESTED")
    assert [r.id for r in requested.context["cl"].result_list] == [open_.id]

    page = order_manager.get(f"/admin/orders/return/{open_.id}/change/").content.decode()
    assert f'href="/admin/orders/return/{open_.id}/receive/">Receive</a>' in page
    assert 'name="status"' not in page and 'name="_save"' not in page  # read-only
    received.refresh_from_db()
    page = order_manager.get(f"/admin/orders/return/{received.id}/change/").content.decode()
    assert "/receive/" not in page and f'href="/admin/orders/refund/{received.refund_id}/change/">€12.50 (' in page


def test_approve_and_reject_actions_decide_each_requested_return_and_skip_the_others(order_manager, provider, order):
    shipped(order)
    first, second = return_of(order, A=1), return_of(order, B=1)
    assert sorted(said(decide(order_manager, "approve", first))) == [
        ("success", f"Return {first.id} (order {order.id}): approved, the shopper may send the parcel.")
    ]
    both = decide(order_manager, "reject", first, second)
    assert sorted(said(both)) == sorted(
        [
            ("warning", f"Return {first.id}: skipped, it is APPROVED."),
            ("success", f"Return {second.id} (order {order.id}): rejected."),
        ]
    )
    statuses = dict(Return.objects.values_list("id", "status"))
    assert statuses == {first.id: Return.Status.APPROVED, second.id: Return.Status.REJECTED}
    assert Return.objects.get(id=first.id).decided_by == order_manager.user
    assert OrderItem.objects.get(order=order, product_id="B").in_returns == 0  # rejected: returnable again


def test_receive_page_restocks_and_writes_off_each_line_and_reports_the_refund(order_manager, provider, order):
    shipped(order)
    returned = return_of(order, A=2, B=1)
    a, b = ReturnLine.objects.filter(return_request=returned).order_by("id")
    url = f"/admin/orders/return/{returned.id}/receive/"
    form = order_manager.get(url).content.decode()
    assert f'<select name="line_{a.id}"' in form and f'<select name="line_{b.id}"' in form
    assert '<option value="restock">Restock (back on sale)</option>' in form

    missing = post(order_manager, url, {f"line_{a.id}": "restock"})
    assert missing.status_code == 200
    assert missing.context["form"].errors == {f"line_{b.id}": ["This field is required."]}
    assert Return.objects.get(id=returned.id).status == Return.Status.REQUESTED

    done = post(order_manager, url, {f"line_{a.id}": "restock", f"line_{b.id}": "damaged"})
    assert done.redirect_chain == [(f"/admin/orders/return/{returned.id}/change/", 302)]
    assert said(done) == [
        ("success", f"Return {returned.id}: received 2 x A (restock), 1 x B (damaged); refund of €30.00 requested.")
    ]
    returned.refresh_from_db()
    assert returned.status == Return.Status.RECEIVED and returned.decided_by == order_manager.user
    assert (returned.refund.amount, returned.refund.reason) == (3000, Refund.Reason.RETURN)
    ledger = StockMovement.objects.filter(reason__in=["returned", "damaged"])
    assert sorted(ledger.values_list("product_id", "reason", "delta")) == [
        ("A", "returned", 2),
        ("B", "damaged", -1),
        ("B", "returned", 1),
    ]
    assert {entry.created_by for entry in ledger} == {order_manager.user}
    assert dict(Stock.objects.values_list("product_id", "available")) == {"A": 10, "B": 9}  # B written off

    again = post(order_manager, url, {f"line_{a.id}": "restock", f"line_{b.id}": "restock"})
    assert said(again) == [
        ("warning", f"Return {returned.id}: only a requested or approved return can be received; it is Received.")
    ]
    assert StockMovement.objects.filter(reason="returned").count() == 2


def test_receive_page_refused_by_the_service_says_why(order_manager, provider, order):
    authorize(order)
    mark_order_shipped(order_id=order.id)
    # As an order shipped before shipping captured first: its payment still only authorized.
    Payment.objects.filter(order=order).update(status=Payment.Status.AUTHORIZED, captured_at=None, captured_amount=0)
    returned = return_of(order, B=1)
    [line] = ReturnLine.objects.filter(return_request=returned)
    refused = post(order_manager, f"/admin/orders/return/{returned.id}/receive/", {f"line_{line.id}": "restock"})
    assert refused.status_code == 200 and refused.redirect_chain == []
    [(level, message)] = said(refused)
    assert level == "error" and message.startswith(f"Return {returned.id}: The order's payment is not captured")
    assert Return.objects.get(id=returned.id).status == Return.Status.REQUESTED


def test_returns_are_for_order_managers_only(stock_manager, order_manager, provider, order):
    shipped(order)
    returned = return_of(order, A=1)
    [line] = ReturnLine.objects.filter(return_request=returned)
    for url in (
        "/admin/orders/return/",
        f"/admin/orders/return/{returned.id}/change/",
        f"/admin/orders/return/{returned.id}/receive/",
    ):
        assert stock_manager.get(url).status_code == 403, url
    assert (
        stock_manager.post(f"/admin/orders/return/{returned.id}/receive/", {f"line_{line.id}": "restock"}).status_code
        == 403
    )
    assert decide(stock_manager, "approve", returned).status_code == 403
    assert Return.objects.get(id=returned.id).status == Return.Status.REQUESTED

    viewer = staff_client()
    viewer.user.user_permissions.add(Permission.objects.get(codename="view_order"))
    assert viewer.get("/admin/orders/return/").status_code == 200
    assert "/receive/" not in viewer.get(f"/admin/orders/return/{returned.id}/change/").content.decode()
    assert viewer.get(f"/admin/orders/return/{returned.id}/receive/").status_code == 403
    decide(viewer, "approve", returned)
    assert Return.objects.get(id=returned.id).status == Return.Status.REQUESTED
    assert 'href="/admin/orders/return/"' in order_manager.get("/admin/").content.decode()


# --- the dashboard ----------------------------------------------------------------------------------------


def test_dashboard_shows_loyalty_entries_and_the_returns_awaiting_staff(
    order_manager, stock_manager, provider, order, monkeypatch
):
    wall_clock_back_to_midday(monkeypatch)  # the entries below and the page's "today" are one day
    shipped(order)
    first, second = return_of(order, A=1), return_of(order, B=1)
    return_of(order, A=1)
    receive_return(return_id=second.id, conditions={"B": "restock"})
    approve_return(return_id=first.id)
    shopper = order.customer
    LoyaltyEntry.objects.create(customer=shopper, order_id=order.id, points=30, reason=LoyaltyEntry.Reason.ORDER_PAID)
    LoyaltyEntry.objects.create(
        customer=shopper, order_id=order.id, points=-5, reason="order_refunded", source="refund-1"
    )

    body = order_manager.get("/admin/dashboard/").content.decode()
    assert '<td id="returns-requested"><a href="/admin/orders/return/?status__exact=REQUESTED">1</a></td>' in body
    assert '<td id="returns-approved"><a href="/admin/orders/return/?status__exact=APPROVED">1</a></td>' in body
    assert '<td id="loyalty-entries-today"><a href="/admin/shop/loyaltyentry/">2</a></td>' in body
    assert '<td id="loyalty-earned-today">30</td>' in body and '<td id="loyalty-taken-back-today">5</td>' in body
    by_reason = body[body.index('<table id="loyalty-by-reason">') :]
    assert "<tr><td>Order paid</td><td>1</td><td>30</td><td>0</td></tr>" in by_reason
    assert "<tr><td>Refund completed</td><td>1</td><td>0</td><td>5</td></tr>" in by_reason

    stocked = stock_manager.get("/admin/dashboard/").content.decode()  # figures, no links they could not follow
    assert '<td id="returns-requested">1</td>' in stocked and '<td id="loyalty-entries-today">2</td>' in stocked
    assert "/admin/orders/return/" not in stocked and "/admin/shop/loyaltyentry/" not in stocked


def test_dashboard_without_returns_or_entries(order_manager):
    body = order_manager.get("/admin/dashboard/").content.decode()
    assert '<td id="returns-requested"><a href="/admin/orders/return/?status__exact=REQUESTED">0</a></td>' in body
    assert '<td id="loyalty-earned-today">0</td>' in body and 'id="loyalty-by-reason"' not in body
