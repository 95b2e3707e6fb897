"""The orders admin's CSV export: streamed, filtered like the change list, and
with cells a spreadsheet would run as formulas neutralised."""

import csv
import io

import pytest

from orders.exports import neutralised
from orders.models import OrderStatus
from tests.factories import OrderFactory, UserFactory
from tests.helpers import staff_client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "value, cell",
    [
        ('=HYPERLINK("x")', '\'=HYPERLINK("x")'),
        ("+1", "'+1"),
        ("-2", "'-2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("ana", "ana"),
        (None, ""),
        (12, "12"),
    ],
)
def test_formula_cells_are_neutralised(value, cell):
    assert neutralised(value) == cell


def test_export_streams_the_selected_orders(settings):
    hacker = UserFactory(username="=cmd|' /C calc'!A0", email="x@example.com")
    paid = OrderFactory(customer=hacker, status=OrderStatus.PAID, total_amount=2500)
    OrderFactory(status=OrderStatus.CANCELLED)
    admin = staff_client(superuser=True)
    form = {"action": "export_csv", "select_across": "1", "index": "0", "_selected_action": [paid.id]}
    response = admin.post("/admin/orders/order/?status__exact=PAID", form)
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:3] == ["id", "created_at", "status"] and len(rows) == 2
    assert rows[1][0] == str(paid.id) and rows[1][2] == "PAID" and rows[1][3] == "'=cmd|' /C calc'!A0"
    assert rows[1][5] == "2500" and rows[1][11] == "ES"
