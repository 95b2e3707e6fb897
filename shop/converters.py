from django.urls import register_converter

from shop.models import SKU_PATTERN


class SkuConverter:
    """Only a SKU of the catalog's shape reaches the views: anything else (a NUL,
    a slash, 65 characters) is a 404 before any query or Redis call."""

    regex = SKU_PATTERN.removeprefix("^").removesuffix("$")

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SkuConverter, "sku")  # once: importing this module registers <sku:...>
