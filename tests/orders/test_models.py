from orders.models import OrderItem, ReturnLine


def test_order_item_str_names_the_sku():
    item = OrderItem(id=7, product_id="MUG-BLUE", quantity=3)

    assert str(item) == "3 x MUG-BLUE"


def test_return_line_str_names_the_sku_of_its_item_not_the_item_id():
    item = OrderItem(id=7, product_id="MUG-BLUE", quantity=3)
    line = ReturnLine(id=11, item=item, quantity=2)

    assert str(line) == "2 x MUG-BLUE"
