import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from cart.services import clear_cart
from core.exceptions import RateLimited
from inventory import gate
from inventory.exceptions import OutOfStock
from inventory.services import reserve_stock
from orders.exceptions import (
    CartEmpty,
    IdempotencyKeyReused,
    OrderNotFound,
    ProductUnavailable,
    TooManyPendingOrders,
)
from orders.metrics import CHECKOUT_REFUSALS, IDEMPOTENT_REPLAYS, ORDERS_CREATED
from orders.models import Order, OrderItem, OrderStatus, PendingOrderCount
from orders.services.admission import admit_cart
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
    # Scalar parameters (IN (%s, ...)), not a list: a list parameter costs
    # more to send than the whole statement (bench/checkout.py, py-spy).
    skus = sorted(lines)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT sku, name, price, is_active FROM {Product._meta.db_table} "
            f"WHERE sku IN ({', '.join(['%s'] * len(skus))})",
            skus,
        )
        products = {sku: (name, price, active) for sku, name, price, active in cursor.fetchall()}
    priced = []
    for sku in skus:
        name, price, active = products.get(sku, (None, None, False))
        if not active:
            raise ProductUnavailable(sku=sku)
        priced.append(_PricedLine(sku, name, lines[sku], price))
    return priced


# One statement takes one of the customer's pending-order slots (the upsert's
# row lock orders a customer's concurrent checkouts; the WHERE refuses the slot
# at the limit) and inserts the order only if it got one; the unique (customer,
# key) turns a second insert of the same key into nothing. It answers (slot
# taken, order id): the limit costs no statement of its own.
_INSERT_ORDER = f"""
WITH slot AS (
    INSERT INTO {PendingOrderCount._meta.db_table} AS c (customer_id, pending) VALUES (%(customer)s, 1)
    ON CONFLICT (customer_id) DO UPDATE SET pending = c.pending + 1 WHERE c.pending < %(limit)s
    RETURNING 1
), new AS (
    INSERT INTO {Order._meta.db_table} (customer_id, idempotency_key, request_hash, status, total_amount,
        currency, created_at, expires_at)
    SELECT %(customer)s, %(key)s, %(hash)s, %(status)s, %(total)s, %(currency)s, %(created)s, %(expires)s FROM slot
    ON CONFLICT (customer_id, idempotency_key) DO NOTHING RETURNING id
)
SELECT EXISTS (SELECT FROM slot), (SELECT id FROM new)
"""


def _insert_order(cursor: CursorWrapper, order: Order) -> tuple[bool, int | None]:
    """(slot taken, order id). No id: the key already has an order (a concurrent
    twin waits for the winner's commit, then sees it) or no slot was free.
    core.db.insert_unless_exists does the same for any model, but prepares
    every field through the ORM, which showed in py-spy profiles of
    bench/checkout.py; here the values go as they are."""
    cursor.execute(
        _INSERT_ORDER,
        {
            "customer": order.customer_id,
            "limit": settings.MAX_PENDING_ORDERS_PER_CUSTOMER,
            "key": order.idempotency_key,
            "hash": order.request_hash,
            "status": order.status,
            "total": order.total_amount,
            "currency": order.currency,
            "created": order.created_at,
            "expires": order.expires_at,
        },
    )
    slot_taken, order_id = cursor.fetchone()
    if order_id is not None:
        order.pk = order_id
        order._state.adding = False
    return slot_taken, order_id


def release_pending_slot(*, customer_id: int) -> None:
    """One of the customer's orders left PENDING_PAYMENT (or was never made): its slot
    is free again. Never below zero: an order written around checkout (a bulk
    load) never took one."""
    PendingOrderCount.objects.filter(customer_id=customer_id).update(pending=Greatest(F("pending") - 1, 0))


def _insert_items(cursor: CursorWrapper, order_id: int, priced: list[_PricedLine]) -> None:
    """All lines in one INSERT, whatever their number."""
    cursor.execute(
        f"INSERT INTO {OrderItem._meta.db_table} (order_id, sku, name, quantity, unit_price) VALUES "
        + ", ".join(["(%s, %s, %s, %s, %s)"] * len(priced)),
        [value for li in priced for value in (order_id, li.sku, li.name, li.quantity, li.unit_price)],
    )


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


def place_order(*, customer_id: int, idempotency_key: str, rate_limited: bool = False) -> PlacedOrder:
    """Turn the shopper's cart into a PENDING_PAYMENT order, reserving its stock.

    The same key returns the same order (replayed=True) whatever happens in
    between; a failed attempt leaves nothing behind, so the key can be retried.
    Flash-sale SKUs pass the Redis gate first: a refusal costs no SQL at all.
    With `rate_limited`, the shopper's checkout rate limit is counted by the
    same Redis call that reads the cart and passes the gate (RateLimited -> 429).
    """
    try:
        admission = admit_cart(customer_id=customer_id, idempotency_key=idempotency_key, rate_limited=rate_limited)
    except (RateLimited, gate.SoldOut, gate.LimitReached) as refused:
        CHECKOUT_REFUSALS.labels(refused.code).inc()
        raise
    lines, gated, admitted = admission.lines, admission.gated, admission.admitted
    if not lines:
        # The key identifies the checkout: after the cart was cleared, a retry
        # still gets its order back.
        existing = _existing_order(customer_id=customer_id, idempotency_key=idempotency_key)
        if existing is None:
            raise CartEmpty()
        IDEMPOTENT_REPLAYS.inc()
        return _replay(existing, request_hash=None)

    try:
        result = _create_order(customer_id=customer_id, idempotency_key=idempotency_key, lines=lines, gated=gated)
    except BaseException as error:
        if admitted:
            _release_best_effort(customer_id, gated)
        if isinstance(error, OutOfStock | TooManyPendingOrders):
            CHECKOUT_REFUSALS.labels(error.code).inc()
        raise
    if result.replayed:
        IDEMPOTENT_REPLAYS.inc()
        if admitted:
            _release_best_effort(customer_id, gated)
    else:
        ORDERS_CREATED.inc()
    return result


def _create_order(
    *, customer_id: int, idempotency_key: str, lines: dict[str, int], gated: dict[str, int]
) -> PlacedOrder:
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
    items = [
        OrderItem(order=order, product_id=li.sku, name=li.name, quantity=li.quantity, unit_price=li.unit_price)
        for li in priced
    ]
    # One cursor for the transaction's statements: opening and closing a Django
    # cursor costs about 27 us, almost half of a short statement's client time.
    with transaction.atomic(), connection.cursor() as cursor:
        slot_taken, order_id = _insert_order(cursor, order)
        if order_id is None:
            existing = _existing_order(customer_id=customer_id, idempotency_key=idempotency_key)
            if existing is None:  # no slot was free
                raise TooManyPendingOrders(limit=settings.MAX_PENDING_ORDERS_PER_CUSTOMER)
            if slot_taken:  # the key's order exists: the slot taken for it goes back
                release_pending_slot(customer_id=customer_id)
            return _replay(existing, request_hash=request_hash)
        _insert_items(cursor, order.id, priced)
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
            cursor=cursor,
        )
        transaction.on_commit(lambda: _after_commit(customer_id, idempotency_key, order.id, bool(gated)))
        # Reserve last: a hot SKU's row stays locked only from its UPDATE to the
        # COMMIT, not while the items and the event are written (measured in
        # bench/checkout.py). Out of stock rolls back all of the above, and
        # drops the on_commit callback.
        reserve_stock(lines={line.sku: line.quantity for line in priced}, cursor=cursor)
    order._prefetched_objects_cache = {"items": items}
    return PlacedOrder(order=order, replayed=False)


def _after_commit(customer_id: int, idempotency_key: str, order_id: int, gated: bool) -> None:
    """Best effort: a failure here is logged, never fails the committed order."""
    try:
        clear_cart(customer_id=customer_id)
        if gated:  # later replays of this key pass the gate without taking units
            gate.mark_order_exists(customer_id=customer_id, idempotency_key=idempotency_key, order_id=order_id)
    except Exception:
        logger.exception("after-commit clean-up failed for order %s of customer %s", order_id, customer_id)


def _release_best_effort(customer_id: int, lines: dict[str, int]) -> None:
    try:
        gate.release(customer_id=customer_id, lines=lines)
    except Exception:  # the gate then undersells until flash_sale_sync; it can never oversell
        logger.exception("could not give gate units back for customer %s: %s", customer_id, lines)


def get_customer_order(*, customer_id: int, order_id: int) -> Order:
    """Someone else's order and a missing one look the same: 404."""
    order = Order.objects.filter(id=order_id, customer_id=customer_id).prefetch_related("items").first()
    if order is None:
        raise OrderNotFound()
    return order
