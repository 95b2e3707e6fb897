import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from cart.services import clear_cart
from cart.storage import read_lines_unchecked
from config.db import insert_unless_exists
from inventory.services import reserve_stock
from orders.exceptions import CartEmpty, IdempotencyKeyReused, OrderNotFound, ProductUnavailable
from orders.models import Order, OrderItem, OrderStatus
from outbox.services import record_event
from shop.models import Product

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlacedOrder:
    order: Order
    replayed: bool


@dataclass(frozen=True)
class _PricedLine:
    sku: str
    name: str
    quantity: int
    unit_price: int


def _price_cart(lines: dict[str, int]) -> list[_PricedLine]:
    products = {
        sku: (name, price, active)
        for sku, name, price, active in Product.objects.filter(sku__in=list(lines)).values_list(
            "sku", "name", "price", "is_active"
        )
    }
    priced = []
    for sku in sorted(lines):
        name, price, active = products.get(sku, (None, None, False))
        if not active:
            raise ProductUnavailable(sku=sku)
        priced.append(_PricedLine(sku, name, lines[sku], price))
    return priced


def _request_hash(lines: list[_PricedLine], currency: str) -> str:
    canonical = json.dumps([currency, [(li.sku, li.quantity, li.unit_price) for li in lines]])
    return hashlib.sha256(canonical.encode()).hexdigest()


def _existing_order(*, customer_id: int, idempotency_key: str) -> Order | None:
    return (
        Order.objects.filter(customer_id=customer_id, idempotency_key=idempotency_key)
        .prefetch_related("items")
        .first()
    )


def _replay(order: Order, request_hash: str | None) -> PlacedOrder:
    if request_hash is not None and order.request_hash != request_hash:
        raise IdempotencyKeyReused(order_id=order.id)
    return PlacedOrder(order=order, replayed=True)


def place_order(*, customer_id: int, idempotency_key: str) -> PlacedOrder:
    """Turn the shopper's cart into a PENDING_PAYMENT order, reserving its stock.

    The same key returns the same order (replayed=True) whatever happens in
    between; a failed attempt leaves nothing behind, so the key can be retried.
    """
    lines = read_lines_unchecked(customer_id=customer_id)
    if not lines:
        # The key identifies the checkout: after the cart was cleared, a retry
        # still gets its order back.
        existing = _existing_order(customer_id=customer_id, idempotency_key=idempotency_key)
        if existing is None:
            raise CartEmpty()
        return _replay(existing, request_hash=None)

    priced = _price_cart(lines)
    currency = settings.SHOP_CURRENCY
    request_hash = _request_hash(priced, currency)
    now = timezone.now()
    order = Order(
        customer_id=customer_id,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        status=OrderStatus.PENDING_PAYMENT,
        total_amount=sum(line.quantity * line.unit_price for line in priced),
        currency=currency,
        created_at=now,
        expires_at=now + timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS),
    )
    with transaction.atomic():
        if insert_unless_exists(order, conflict_fields=["customer", "idempotency_key"]) is None:
            existing = _existing_order(customer_id=customer_id, idempotency_key=idempotency_key)
            return _replay(existing, request_hash=request_hash)
        reserve_stock(lines={line.sku: line.quantity for line in priced})
        items = OrderItem.objects.bulk_create(
            [
                OrderItem(order=order, product_id=li.sku, name=li.name, quantity=li.quantity, unit_price=li.unit_price)
                for li in priced
            ]
        )
        record_event(
            aggregate_type="order",
            aggregate_id=order.id,
            event_type="OrderCreated",
            data={
                "order_id": order.id,
                "customer_id": customer_id,
                "items": [
                    {"sku": li.sku, "name": li.name, "quantity": li.quantity, "unit_price": li.unit_price}
                    for li in priced
                ],
                "total": order.total_amount,
                "currency": currency,
                "expires_at": order.expires_at.isoformat(),
            },
        )
        transaction.on_commit(lambda: _clear_cart_best_effort(customer_id))
    order._prefetched_objects_cache = {"items": items}
    return PlacedOrder(order=order, replayed=False)


def _clear_cart_best_effort(customer_id: int) -> None:
    try:
        clear_cart(customer_id=customer_id)
    except Exception:  # the order is committed; a stale cart is only an annoyance
        logger.exception("could not clear the cart of customer %s after checkout", customer_id)


def get_customer_order(*, customer_id: int, order_id: int) -> Order:
    """Someone else's order and a missing one look the same: 404."""
    order = Order.objects.filter(id=order_id, customer_id=customer_id).prefetch_related("items").first()
    if order is None:
        raise OrderNotFound()
    return order
