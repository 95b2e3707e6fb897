"""The catalog shoppers browse (GET /api/products): active products with a stock
hint, from process memory once warm.

The products are read once per cache generation (any product change moves it:
core/hotcache.py), the stock of every SKU at most every STOCK_HINT_MAX_AGE_SECONDS
(one query for all of them): `available` is a hint, checkout decides. Searching,
filtering, sorting and paging run over the in-memory list, so a warm request
makes no SQL query whatever its parameters."""

import time
from dataclasses import dataclass, field

from core.hotcache import hot_cache
from inventory.models import Stock
from inventory.services.flash_sales import gated_skus
from inventory.stock_hints import STOCK_HINT_MAX_AGE_SECONDS, remember_available
from shop.models import Product

SORTS = {
    "sku": lambda p: p.sku,
    "name": lambda p: (p.name.casefold(), p.sku),
    "price": lambda p: (p.price, p.sku),
    "-price": lambda p: (-p.price, p.sku),
}


@dataclass(frozen=True)
class CatalogProduct:
    sku: str
    name: str
    price: int
    description: str
    image_url: str


@dataclass
class _Catalog:
    products: list[CatalogProduct]  # by SKU
    by_sku: dict[str, CatalogProduct]
    haystacks: list[str]  # casefolded "sku\nname", for ?q=
    sorted_by: dict[str, list[CatalogProduct]] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)
    stock_read_at: float = float("-inf")
    answers: dict = field(default_factory=dict)  # see answers()


@dataclass(frozen=True)
class ProductView:
    product: CatalogProduct
    available: int
    flash_sale: bool


def _catalog() -> _Catalog:
    catalog = hot_cache.catalog
    if catalog is None:
        hot_cache.ensure_generation()  # before the read: a change committed meanwhile moves it again
        rows = Product.objects.filter(is_active=True).order_by("sku")
        products = [
            CatalogProduct(*row) for row in rows.values_list("sku", "name", "price", "description", "image_url")
        ]
        catalog = _Catalog(
            products=products,
            by_sku={p.sku: p for p in products},
            haystacks=[f"{p.sku}\n{p.name}".casefold() for p in products],
        )
        hot_cache.catalog = catalog
    if time.monotonic() - catalog.stock_read_at >= STOCK_HINT_MAX_AGE_SECONDS:
        catalog.available = dict(Stock.objects.values_list("product_id", "available"))
        catalog.stock_read_at = time.monotonic()
        catalog.answers = {}
        remember_available(catalog.available)  # the cart's "in stock" hints, for free
    return catalog


MAX_ANSWERS = 10_000


def answers() -> dict:
    """A dict that lives exactly as long as what the catalog answers from (these
    products, this stock read, these flash sales): the API keeps its rendered
    answers in it, so a page asked for again costs a dict lookup."""
    memo = _catalog().answers
    if len(memo) >= MAX_ANSWERS:  # made-up queries cannot grow it without bound
        memo.clear()
    return memo


def browse_products(*, q: str = "", in_stock: bool = False, sort: str = "sku") -> list[CatalogProduct]:
    """Active products matching `q` (SKU or name, case-insensitive), in stock
    only if asked, in `sort` order (a key of SORTS): page them, then `with_stock`."""
    catalog = _catalog()
    products = catalog.sorted_by.get(sort)
    if products is None:
        products = catalog.sorted_by[sort] = sorted(catalog.products, key=SORTS[sort])
    if q:
        needle = q.casefold()
        matching = {p.sku for p, hay in zip(catalog.products, catalog.haystacks, strict=True) if needle in hay}
        products = [p for p in products if p.sku in matching]
    if in_stock:
        products = [p for p in products if catalog.available.get(p.sku, 0) > 0]
    return products


def with_stock(products: list[CatalogProduct]) -> list[ProductView]:
    """The products with their stock hint and whether a flash-sale gate is on."""
    catalog, sales = _catalog(), gated_skus()
    return [ProductView(p, catalog.available.get(p.sku, 0), p.sku in sales) for p in products]


def browse_product(*, sku: str) -> ProductView | None:
    product = _catalog().by_sku.get(sku)
    return None if product is None else with_stock([product])[0]
