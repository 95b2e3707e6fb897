"""factory-boy factories: one row each, valid for its table's constraints.

They write rows as they stand, not through the services: StockFactory's units are
not in the ledger (product_with_stock receives them through it), FlashSaleFactory
sets no gate counter (seed_flash_sale does), OrderFactory takes no stock and no
pending-order slot (place_order does). Use them where a test needs the row, not
what the service would have done around it."""

from datetime import datetime, timedelta

import factory
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.utils import timezone

from inventory.models import FlashSale, Stock
from orders.models import Order, OrderItem, OrderStatus, Payment
from shop.models import Address, Product, Promotion

PASSWORD = "correct-horse-battery"
SHIPPING_ADDRESS = {
    "name": "Ana García",
    "line1": "Calle Mayor 1",
    "line2": "",
    "city": "Madrid",
    "postal_code": "28013",
    "country": "ES",
    "phone": "+34 600 000 000",
}


class UserFactory(factory.django.DjangoModelFactory[AbstractUser]):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"shopper{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password(PASSWORD)
    # A shopper of some standing: accounts made minutes ago get a shorter time to pay
    # (NEW_ACCOUNT_SECONDS); a test of that makes its user with date_joined=timezone.now().
    date_joined = factory.LazyFunction(lambda: timezone.now() - timedelta(days=30))
    # A shopper can check out without sending an address: they have a saved one.
    address = factory.RelatedFactory("tests.factories.AddressFactory", factory_related_name="customer")


class ShopperWithoutAddressFactory(UserFactory):
    address = factory.PostGeneration(lambda user, create, extracted, **kwargs: None)


class AddressFactory(factory.django.DjangoModelFactory[Address]):
    class Meta:
        model = Address

    customer = factory.SubFactory(ShopperWithoutAddressFactory)
    name = factory.LazyAttribute(lambda a: a.customer.username)
    line1 = "Calle Mayor 1"
    city = "Madrid"
    postal_code = "28013"
    country = "ES"
    phone = "+34 600 000 000"


class ProductFactory(factory.django.DjangoModelFactory[Product]):
    class Meta:
        model = Product

    sku = factory.Sequence(lambda n: f"SKU-{n:05d}")
    name = factory.Sequence(lambda n: f"Product {n}")
    price = 1000
    is_active = True


class StockFactory(factory.django.DjangoModelFactory[Stock]):
    """A stock row outside the ledger: stock_audit shows its units as a difference."""

    class Meta:
        model = Stock

    product = factory.SubFactory(ProductFactory)
    available = 0
    reserved = 0
    shipped = 0


class FlashSaleFactory(factory.django.DjangoModelFactory[FlashSale]):
    """The flash-sale row only: no gate counter in Redis, so checkout of its SKU fails closed."""

    class Meta:
        model = FlashSale

    product = factory.SubFactory(ProductFactory)
    per_customer_limit = None


def _deadline(order: Order) -> datetime:
    return order.created_at + timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS)


class OrderFactory(factory.django.DjangoModelFactory[Order]):
    """An order row, PENDING_PAYMENT until its payment deadline unless told otherwise."""

    class Meta:
        model = Order

    customer = factory.SubFactory(UserFactory)
    idempotency_key = factory.Sequence(lambda n: f"order-key-{n}")
    request_hash = "h"
    status = OrderStatus.PENDING_PAYMENT
    total_amount = 1000
    shipping_address = factory.LazyFunction(lambda: dict(SHIPPING_ADDRESS))
    currency = factory.LazyFunction(lambda: settings.SHOP_CURRENCY)
    created_at = factory.LazyFunction(timezone.now)
    expires_at = factory.LazyAttribute(_deadline)


class OrderItemFactory(factory.django.DjangoModelFactory[OrderItem]):
    """A line of an order at the product's current name and price."""

    class Meta:
        model = OrderItem

    order = factory.SubFactory(OrderFactory)
    product = factory.SubFactory(ProductFactory)
    name = factory.LazyAttribute(lambda item: item.product.name)
    quantity = 1
    unit_price = factory.LazyAttribute(lambda item: item.product.price)
    discount = 0
    gross = factory.LazyAttribute(lambda item: item.quantity * item.unit_price - item.discount)  # no tax


class PaymentFactory(factory.django.DjangoModelFactory[Payment]):
    """A captured payment of the whole order, applied to it (the order's status is left as it is)."""

    class Meta:
        model = Payment

    provider_payment_id = factory.Sequence(lambda n: f"pay_{n}")
    order = factory.SubFactory(OrderFactory)
    amount = factory.LazyAttribute(lambda p: p.order.total_amount if p.order else 1000)
    currency = factory.LazyAttribute(lambda p: p.order.currency if p.order else settings.SHOP_CURRENCY)
    status = Payment.Status.CAPTURED
    outcome = Payment.Outcome.APPLIED
    received_at = factory.LazyFunction(timezone.now)
    authorized_at = factory.LazyAttribute(lambda p: p.received_at)
    captured_at = factory.LazyAttribute(lambda p: p.received_at)
    raw_body = "{}"


def product_with_stock(*, available: int = 10, **kwargs) -> Product:
    """A product whose stock arrived through the ledger, as in production."""
    from inventory.services import receive_stock

    product = ProductFactory(**kwargs)
    if available:
        receive_stock(sku=product.sku, quantity=available)
    else:
        StockFactory(product=product)
    return product


def api_token(user: AbstractUser) -> str:
    """A new API token of the user, as logging in gives one (the database keeps its digest)."""
    from knox.models import AuthToken

    return AuthToken.objects.create(user=user)[1]


class PromotionFactory(factory.django.DjangoModelFactory[Promotion]):
    """An automatic promotion, 10% off each unit of the whole cart, started an hour
    ago and open-ended. Give `products=[...]` (with scope=Promotion.Scope.SKUS) for
    a SKU promotion, `code` (and limits) for a voucher."""

    class Meta:
        model = Promotion
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Promotion {n}")
    kind = Promotion.Kind.PERCENT
    value = 10
    scope = Promotion.Scope.CART
    starts_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=1))

    @factory.post_generation
    def products(self, create, extracted, **kwargs):
        if create and extracted:
            self.products.set(extracted)


class VoucherFactory(PromotionFactory):
    """A voucher: 10% off each unit of the whole cart under a code of its own, no
    limits (give `usage_limit`, `per_customer_limit`)."""

    name = factory.Sequence(lambda n: f"Voucher {n}")
    code = factory.Sequence(lambda n: f"CODE-{n}")
