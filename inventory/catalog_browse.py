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
from inventory.services.flash_sales import GateRule, gate_rules
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
    answers_until_ms: float = 0  # the next flash-sale window edge: the answers change there


@dataclass(frozen=True)
class SaleWindow:
    """A flash sale as the catalog shows it: its window (ISO 8601; no end: None)
    and whether checkouts are admitted now."""

    starts_at: str
    ends_at: str | None
    open: bool
    sale_price: int | None

    @classmethod
    def of(cls, rule: GateRule, now_ms: float) -> "SaleWindow":
        is_open = rule.opens_ms <= now_ms and (not rule.closes_ms or now_ms < rule.closes_ms)
        return cls(rule.starts_at, rule.ends_at, is_open, rule.sale_price)


@dataclass(frozen=True)
class ProductView:
    product: CatalogProduct
    available: int
    flash_sale: SaleWindow | None


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
        catalog.answers, catalog.answers_until_ms = {}, 0
        remember_available(catalog.available)  # the cart's "in stock" hints, for free
    return catalog


MAX_ANSWERS = 10_000


def answers() -> dict:
    """A dict that lives exactly as long as what the catalog answers from (these
    products, this stock read, these flash sales): the API keeps its rendered
    answers in it, so a page asked for again costs a dict lookup. A flash sale that
    opens or closes changes the answers (and their ETag) at that moment."""
    catalog, now_ms = _catalog(), time.time() * 1000
    if now_ms >= catalog.answers_until_ms:
        catalog.answers, catalog.answers_until_ms = {}, _next_window_edge(now_ms)
    memo = catalog.answers
    if len(memo) >= MAX_ANSWERS:  # made-up queries cannot grow it without bound
        memo.clear()
    return memo


def answer_in_memory(key: str):
    """What answers() holds for `key` when it still stands and reading it needs no
    query (the catalog loaded, its stock read fresh, no flash-sale edge passed),
    else None: answers() then reads what is due first."""
    catalog = hot_cache.catalog
    if (
        catalog is None
        or time.monotonic() - catalog.stock_read_at >= STOCK_HINT_MAX_AGE_SECONDS
        or time.time() * 1000 >= catalog.answers_until_ms
    ):
        return None
    return catalog.answers.get(key)


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


def _next_window_edge(now_ms: float) -> float:
    edges = [edge for rule in gate_rules().values() for edge in (rule.opens_ms, rule.closes_ms) if edge > now_ms]
    return min(edges, default=float("inf"))


def with_stock(products: list[CatalogProduct]) -> list[ProductView]:
    """The products with their stock hint and their flash sale's window, if any."""
    catalog, sales, now_ms = _catalog(), gate_rules(), time.time() * 1000
    return [
        ProductView(p, catalog.available.get(p.sku, 0), SaleWindow.of(sales[p.sku], now_ms) if p.sku in sales else None)
        for p in products
    ]


def browse_product(*, sku: str) -> ProductView | None:
    product = _catalog().by_sku.get(sku)
    return None if product is None else with_stock([product])[0]
