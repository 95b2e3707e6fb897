"""tests/factories.py: every factory writes a row its table's constraints accept, with
the links between them consistent (an item priced as its product, a payment of its order)."""

import pytest

from inventory.models import FlashSale, Stock
from orders.models import Order, OrderItem, OrderStatus, Payment
from tests.factories import (
    FlashSaleFactory,
    OrderFactory,
    OrderItemFactory,
    PaymentFactory,
    ProductFactory,
    StockFactory,
    UserFactory,
    product_with_stock,
)

pytestmark = pytest.mark.django_db


def test_each_factory_writes_a_valid_row():
    user = UserFactory()
    assert user.check_password("correct-horse-battery")
    stock = StockFactory(available=3)
    sale = FlashSaleFactory(product=stock.product, per_customer_limit=1)
    item = OrderItemFactory(order=OrderFactory(customer=user), quantity=2)
    payment = PaymentFactory(order=item.order)
    assert Stock.objects.get(product=stock.product).available == 3
    assert FlashSale.objects.get().product_id == sale.product_id == stock.product_id
    order = Order.objects.get()
    assert (order.customer, order.status, order.currency) == (user, OrderStatus.PENDING_PAYMENT, "EUR")
    assert order.expires_at > order.created_at
    assert OrderItem.objects.get().unit_price == item.product.price
    assert (payment.amount, payment.currency) == (order.total_amount, order.currency)
    assert Payment.objects.get().outcome == Payment.Outcome.APPLIED


def test_product_with_no_stock_still_has_its_stock_row():
    product = product_with_stock(available=0)
    assert Stock.objects.get(product=product).available == 0
    assert ProductFactory().sku != product.sku
