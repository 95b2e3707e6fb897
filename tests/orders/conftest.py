import pytest

from tests.factories import UserFactory, product_with_stock
from tests.helpers import place_pending_order


@pytest.fixture
def order(redis):
    """A pending order of 2 x "A" at 250 (10 in stock), as checkout places it."""
    product_with_stock(sku="A", price=250, available=10)
    return place_pending_order(redis, UserFactory(), {"A": 2})
