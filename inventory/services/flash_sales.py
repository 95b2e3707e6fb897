import logging
from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from core.exceptions import NotFound
from core.hotcache import StaleCache, hot_cache
from core.locks import for_update
from inventory import gate
from inventory.gate import GateRule
from inventory.models import FlashSale, Stock
from inventory.services.stock import set_available_stock
from shop.models import Product, Promotion

logger = logging.getLogger(__name__)
KEEP = object()  # seed_flash_sale's ends_at not given: a re-seeded sale keeps its own


def _ms(moment: datetime | None) -> int:
    return 0 if moment is None else int(moment.timestamp() * 1000)


def _read_gate_rules() -> dict[str, GateRule]:
    rows = FlashSale.objects.values_list(
        "product_id", "per_customer_limit", "mode", "starts_at", "ends_at", "sale_price"
    )
    return {
        sku: GateRule(limit or 0, mode, _ms(starts), _ms(ends), price) for sku, limit, mode, starts, ends, price in rows
    }


def gate_rules() -> dict[str, GateRule]:
    """Gated SKU -> its rule, from process memory once warm, with no Redis call:
    for callers whose next Redis script compares the cache generation (checkout's
    admission; cart/lua), so that a list gone stale is refused there. Any other
    caller asks current_gate_rules()."""
    if hot_cache.flash_sales is None:
        hot_cache.ensure_generation()  # before the read: a sale committed meanwhile moves it again
        hot_cache.flash_sales = _read_gate_rules()
    return hot_cache.flash_sales


def current_gate_rules() -> dict[str, GateRule]:
    """gate_rules() as every process knows them now (a sale seeded, changed or
    ended moves the cache generation): one Redis GET compares this process's
    generation, and a moved one drops its caches and reads the list again. For
    a process that otherwise never hears of a new sale: the worker gives back
    the units of expired or cancelled orders through it. Without Redis, the
    database answers."""
    try:
        try:
            hot_cache.check_generation()
        except StaleCache:
            hot_cache.clear()
        return gate_rules()
    except RedisError:
        logger.warning("cache generation unreadable: flash sales read from the database")
        return _read_gate_rules()


def gate_rules_in_memory() -> dict[str, GateRule] | None:
    """gate_rules() when this process holds them, else None (and no query)."""
    return hot_cache.flash_sales


def gated_skus() -> dict[str, int]:
    """Gated SKU -> per-customer limit (0: none), as of now (current_gate_rules)."""
    return {sku: rule.limit for sku, rule in current_gate_rules().items()}


def queued_skus() -> set[str]:
    """The gated SKUs whose admitted checkouts go through the queue (checkout,
    whose admission compares the cache generation)."""
    return {sku for sku, rule in gate_rules().items() if rule.mode == FlashSale.Mode.QUEUE}


@transaction.atomic
def set_flash_sale_mode(*, sku: str, mode: str) -> FlashSale:
    """Switch a running sale between direct and queue mode. Checkouts admitted
    before the switch finish the way they started; the queue's writer goes on
    draining what is already in Kafka."""
    if mode not in FlashSale.Mode.values:
        raise ValueError(f"mode must be one of {', '.join(FlashSale.Mode.values)}")
    sale = FlashSale.objects.filter(product_id=sku).first()
    if sale is None:
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    sale.mode = mode
    sale.save(update_fields=["mode"])  # post_save moves the cache generation: every process sees the switch
    return sale


@transaction.atomic
def seed_flash_sale(
    *,
    sku: str,
    stock: int,
    price: int | None = None,
    name: str | None = None,
    per_customer_limit: int | None = None,
    mode: str = FlashSale.Mode.DIRECT,
    starts_at: datetime | None = None,
    ends_at: datetime | None | object = KEEP,
    sale_price: int | None | object = KEEP,
    user: AbstractBaseUser | None = None,
) -> FlashSale:
    """Create or update the product, bring its available stock to exactly
    `stock` through the ledger, and open the gate with the same number, for
    checkouts from `starts_at` until `ends_at` (None: no end), a unit at
    `sale_price` inside that window (None: the catalog price). Not given, a new
    sale opens now with no end at the catalog price, and a re-seeded one keeps
    its window and price."""
    product = Product.objects.filter(sku=sku).first()
    if product is None:
        if price is None:
            raise ValueError(f"{sku} is a new product: give it a price")
        product = Product.objects.create(sku=sku, name=name or sku, price=price)
    else:
        changes = {k: v for k, v in {"price": price, "name": name, "is_active": True}.items() if v is not None}
        Product.objects.filter(sku=sku).update(**changes)  # FlashSale's post_save moves the cache generation
    set_available_stock(sku=sku, available=stock, user=user, note="flash sale seed")
    if mode not in FlashSale.Mode.values:
        raise ValueError(f"mode must be one of {', '.join(FlashSale.Mode.values)}")
    running = FlashSale.objects.filter(product=product).values("starts_at", "ends_at", "sale_price").first()
    starts_at = starts_at or (running["starts_at"] if running else timezone.now())
    if ends_at is KEEP:
        ends_at = running["ends_at"] if running else None
    if sale_price is KEEP:
        sale_price = running["sale_price"] if running else None
    if ends_at is not None and ends_at <= starts_at:
        raise ValueError("a sale ends after it starts")
    sale, _ = FlashSale.objects.update_or_create(
        product=product,
        defaults={
            "per_customer_limit": per_customer_limit,
            "mode": mode,
            "starts_at": starts_at,
            "ends_at": ends_at,
            "sale_price": sale_price,
        },
    )
    _price_the_sale(sale)
    transaction.on_commit(lambda: gate.set_counter(sku=sku, remaining=stock, reset_customers=True))
    return sale


RULE_FIELDS = ("per_customer_limit", "mode", "starts_at", "ends_at", "sale_price")


@transaction.atomic
def update_flash_sale(*, sku: str, **changes) -> FlashSale:
    """Change some of a running or scheduled sale's rule (RULE_FIELDS), and only
    those: a change made meanwhile to another field (the mode switched by a
    command) stays. Its units stay as they are (seed_flash_sale sets those). The
    change moves the cache generation: every process admits by the new rule at once."""
    if unknown := set(changes) - set(RULE_FIELDS):
        raise ValueError(f"not a rule field: {', '.join(sorted(unknown))}")
    if "mode" in changes and changes["mode"] not in FlashSale.Mode.values:
        raise ValueError(f"mode must be one of {', '.join(FlashSale.Mode.values)}")
    sale = for_update(FlashSale.objects.filter(product_id=sku)).first()
    if sale is None:
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    for name, value in changes.items():
        setattr(sale, name, value)
    if sale.ends_at is not None and sale.ends_at <= sale.starts_at:
        raise ValueError("a sale ends after it starts")
    if changes:
        sale.save(update_fields=list(changes))
    if changes.keys() & {"starts_at", "ends_at", "sale_price"}:
        _price_the_sale(sale)
    return sale


def _price_the_sale(sale: FlashSale) -> None:
    """The sale's price as the shop prices everything (shop/pricing.py): an
    automatic promotion of its SKU, in its window, that the cart, checkout and
    the queue's writer apply like any other; none without a sale price. Saving
    it moves the cache generation (shop/signals.py)."""
    promotion = sale.promotion
    if sale.sale_price is None:
        if promotion is not None:
            sale.promotion = None
            sale.save(update_fields=["promotion"])
            promotion.delete()
        return
    fields = {
        "name": f"Flash sale {sale.product_id}",
        "kind": Promotion.Kind.SALE_PRICE,
        "value": sale.sale_price,
        "scope": Promotion.Scope.SKUS,
        "starts_at": sale.starts_at,
        "ends_at": sale.ends_at,
    }
    if promotion is None:
        promotion = Promotion.objects.create(**fields)
        promotion.products.set([sale.product_id])
        sale.promotion = promotion
        sale.save(update_fields=["promotion"])
    else:
        for name, value in fields.items():
            setattr(promotion, name, value)
        promotion.save(update_fields=[*fields, "updated_at"])


def sync_flash_sale(*, sku: str) -> int:
    """Reset the gate's counter from the database (after a Redis restart or a
    lost release). Returns the new counter."""
    if not FlashSale.objects.filter(product_id=sku).exists():
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    available = Stock.objects.filter(product_id=sku).values_list("available", flat=True).first() or 0
    gate.set_counter(sku=sku, remaining=available, reset_customers=False)
    return available


@transaction.atomic
def end_flash_sale(*, sku: str) -> None:
    """The sale gone, its gate after the commit, and its price (orders placed in it keep theirs)."""
    sale = for_update(FlashSale.objects.filter(product_id=sku)).first()
    if sale is None:
        raise NotFound(f"{sku} is not in a flash sale", sku=sku)
    sale.delete()
    if sale.promotion_id is not None:
        Promotion.objects.filter(pk=sale.promotion_id).delete()
    transaction.on_commit(lambda: gate.remove(sku=sku))
