import factory
from django.contrib.auth import get_user_model

from shop.models import Product


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"shopper{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct-horse-battery")


class ProductFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Product

    sku = factory.Sequence(lambda n: f"SKU-{n:05d}")
    name = factory.Sequence(lambda n: f"Product {n}")
    price = 1000
    is_active = True


def product_with_stock(*, available: int = 10, **kwargs) -> Product:
    """A product whose stock arrived through the ledger, as in production."""
    from inventory.services import receive_stock

    product = ProductFactory(**kwargs)
    if available:
        receive_stock(sku=product.sku, quantity=available)
    else:
        from inventory.models import Stock

        Stock.objects.create(product=product)
    return product


def api_token(user) -> str:
    """A new API token of the user, as logging in gives one (the database keeps its digest)."""
    from knox.models import AuthToken

    return AuthToken.objects.create(user=user)[1]
