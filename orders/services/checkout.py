import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.db import insert_unless_exists
from core.exceptions import RateLimited
from inventory import gate
from inventory.exceptions import OutOfStock
from inventory.services import reserve_stock
from inventory.services.flash_sales import queued_skus
from orders.exceptions import (
    CartEmpty,
    HoldLimitReached,
    OrderNotFound,
    ShippingAddressRequired,
    TooManyPendingOrders,
)
from orders.metrics import CHECKOUT_REFUSALS, IDEMPOTENT_REPLAYS, ORDERS_CREATED, QUEUE_ADMITTED
from orders.models import Order, OrderItem
from orders.services.admission import admit_cart, give_back_cart
from orders.services.builder import OrderDraft, build_order, price_cart
from orders.services.holds import hold_address, take_holds
from orders.services.idempotency import order_under_key, same_request
from orders.services.queue_admission import (
    QUEUED,
    queue_checkout,
    queued_or_written_order,
    refuse_while_broker_down,
)
from orders.services.slots import release_pending_slots, take_pending_slot
from outbox.services import record_events
from shop.accounts import require_verified_email
from shop.exceptions import ShippingMethodRequired, ShippingMethodUnavailable, VoucherRefused, VoucherUsedUp
from shop.promotions import redeem_voucher
from shop.services import default_address

logger = logging.getLogger(__name__)
ShippingRefused = ShippingMethodRequired | ShippingMethodUnavailable


@dataclass(frozen=True)
class PlacedOrder:
    order: Order
    replayed: bool
    queued: bool = False  # handed to the flash-sale queue: written later by write_queued_orders


def place_order(
    *,
    customer_id: int,
    idempotency_key: str,
    rate_limited: bool = False,
    shipping_address: dict | None = None,
    client_address: str = "",
    account_created_at: datetime | None = None,
) -> PlacedOrder:
    """Turn the shopper's cart into a PENDING_PAYMENT order, reserving its stock,
    shipped to `shipping_address` (validated by the caller) or else to the
    shopper's saved address (ShippingAddressRequired when neither).

    The same key returns the same order (replayed=True) whatever happens in
    between; a failed attempt leaves nothing behind, so the key can be retried.
    Flash-sale SKUs pass the Redis gate first: a refusal costs no SQL at all.
    With `rate_limited`, the shopper's checkout rate limit is counted by the
    same Redis call that reads the cart and passes the gate (RateLimited -> 429).
    A direct order's units count against the shopper's and the client address's
    unpaid holds (HoldLimitReached -> 409; an established shopper's against their
    own only: orders/services/holds.py), and an account younger than
    NEW_ACCOUNT_SECONDS gets NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS to pay. With
    REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT, a shopper whose e-mail is not verified is
    refused first (EmailNotVerified -> 403; no query when the setting is off).
    """
    require_verified_email(customer_id=customer_id)
    refuse_while_broker_down(customer_id=customer_id)
    try:
        admission = admit_cart(customer_id=customer_id, idempotency_key=idempotency_key, rate_limited=rate_limited)
    except (RateLimited, gate.SoldOut, gate.LimitReached) as refused:
        CHECKOUT_REFUSALS.labels(refused.code).inc()
        raise
    lines, gated, admitted = admission.lines, admission.gated, admission.admitted
    if not lines:
        # The key identifies the checkout: after the cart was cleared, a retry
        # still gets its order back.
        existing = order_under_key(customer_id=customer_id, idempotency_key=idempotency_key)
        if existing is None:
            raise CartEmpty()
        IDEMPOTENT_REPLAYS.inc()
        return PlacedOrder(order=existing, replayed=True)
    if not admission.took_cart:
        # The cart an earlier attempt under this key took (its answer was lost): the
        # order that attempt wrote, if any, is the answer, whatever prices or
        # promotions have done since (one statement, on retries only).
        existing = order_under_key(customer_id=customer_id, idempotency_key=idempotency_key)
        if existing is not None:
            if admitted:
                _release_best_effort(customer_id, gated)
            IDEMPOTENT_REPLAYS.inc()
            return PlacedOrder(order=existing, replayed=True)

    try:
        # After the gate: a refused checkout makes no query; the saved address came
        # with the admission (a statement only when Redis has forgotten it).
        address = shipping_address or default_address(customer_id=customer_id, cached=admission.saved_address)
        if address is None:
            raise ShippingAddressRequired()
        priced = price_cart(
            lines, country=address["country"], voucher_code=admission.voucher, shipping_code=admission.shipping_code
        )
        draft = OrderDraft(
            customer_id,
            idempotency_key,
            priced.lines,
            settings.SHOP_CURRENCY,
            address,
            _payment_timeout(account_created_at),
            hold_address(customer_id=customer_id, client_address=client_address),
            priced.discounts,
            priced.charges,
        )
        queue = queued_skus()
        if queue and not queue.isdisjoint(lines):
            result = _queue_order(lines=lines, gated=gated if admitted else {}, queue=queue, draft=draft)
        else:
            result = _create_order(draft=draft, gated=gated)
    except BaseException as error:
        if admitted:
            _release_best_effort(customer_id, gated)
        if admission.took_cart:  # a voucher with no use left does not come back with it
            give_back_cart(customer_id, idempotency_key, drop_voucher=isinstance(error, VoucherUsedUp))
        if isinstance(error, OutOfStock | TooManyPendingOrders | HoldLimitReached | VoucherRefused | ShippingRefused):
            CHECKOUT_REFUSALS.labels(error.code).inc()
        raise
    if result.replayed:
        IDEMPOTENT_REPLAYS.inc()
        if admitted:
            _release_best_effort(customer_id, gated)
        if admission.took_cart:  # this cart is not the replayed order's
            give_back_cart(customer_id, idempotency_key)
    elif result.queued:
        QUEUE_ADMITTED.inc()
    else:
        ORDERS_CREATED.inc()
    return result


def _queue_order(*, lines: dict[str, int], gated: dict[str, int], queue: set[str], draft: OrderDraft) -> PlacedOrder:
    """A cart with a queue-mode flash-sale SKU: priced as any, then handed to
    Kafka (orders/services/queue_admission.py); the queue's writer builds the order from
    the same draft."""
    order, replayed = queue_checkout(draft=draft, gated=gated, partition_key=min(queue.intersection(lines)))
    return PlacedOrder(order=order, replayed=replayed, queued=order.status == QUEUED)


def _payment_timeout(account_created_at: datetime | None) -> int:
    """Seconds to pay: never longer for an account made minutes ago (a fresh
    account is the cheapest way to hold stock without paying), so the smaller of
    its window and the shop's (an operator may shorten the shop's for a sale)."""
    new = account_created_at is not None and timezone.now() - account_created_at < timedelta(
        seconds=settings.NEW_ACCOUNT_SECONDS
    )
    shops = settings.ORDER_PAYMENT_TIMEOUT_SECONDS
    return min(settings.NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS, shops) if new else shops


def _create_order(*, draft: OrderDraft, gated: dict[str, int]) -> PlacedOrder:
    customer_id, idempotency_key = draft.customer_id, draft.idempotency_key
    built = build_order(draft, now=timezone.now(), takes_holds=True)
    request_hash = built.fields["request_hash"]
    order = Order(**built.fields)
    items = [OrderItem(order=order, **item) for item in built.items]
    with transaction.atomic():
        if not take_pending_slot(customer_id=customer_id):
            existing = order_under_key(customer_id=customer_id, idempotency_key=idempotency_key)
            if existing is None:
                raise TooManyPendingOrders(limit=settings.MAX_PENDING_ORDERS_PER_CUSTOMER)
            return PlacedOrder(order=same_request(existing, request_hash), replayed=True)
        # The unique (customer, key) decides between twins: the second waits for the
        # first's commit, then inserts nothing and replays the first's order. The
        # items go with the order, in its statement.
        if insert_unless_exists(order, conflict_fields=["customer", "idempotency_key"], children=items) is None:
            release_pending_slots(customer_ids=[customer_id])
            existing = order_under_key(customer_id=customer_id, idempotency_key=idempotency_key)
            return PlacedOrder(order=same_request(existing, request_hash), replayed=True)
        lines = {line.sku: line.quantity for line in draft.lines}
        take_holds(customer_id=customer_id, address=draft.client_address, lines=lines)
        record_events([built.event(order.id)])
        if gated:  # later replays of this key pass the gate without taking units
            transaction.on_commit(lambda: _mark_order_exists(customer_id, idempotency_key, order.id))
        # Reserve last: a hot SKU's row stays locked only from its UPDATE to the
        # COMMIT, not while the items and the event are written (measured in
        # bench/checkout.py). Out of stock rolls back all of the above, and
        # drops the on_commit callback. (A voucher's row before any stock row:
        # core/locks.py.)
        if draft.voucher_id is not None:  # one statement; VoucherUsedUp rolls all of this back
            redeem_voucher(voucher_id=draft.voucher_id, customer_id=customer_id, order_id=order.id)
        reserve_stock(lines=lines)
    order._prefetched_objects_cache = {"items": items, "refunds": []}
    return PlacedOrder(order=order, replayed=False)


def _mark_order_exists(customer_id: int, idempotency_key: str, order_id: int) -> None:
    """Best effort: a failure here is logged, never fails the committed order
    (without the mark a replay of the key takes gate units, then gives them back)."""
    try:
        gate.mark_order_exists(customer_id=customer_id, idempotency_key=idempotency_key, order_id=order_id)
    except Exception:
        logger.exception("could not mark order %s of customer %s in the gate", order_id, customer_id)


def _release_best_effort(customer_id: int, lines: dict[str, int]) -> None:
    try:
        gate.release(customer_id=customer_id, lines=lines)
    except Exception:  # the gate then undersells until flash_sale_sync; it can never oversell
        logger.exception("could not give gate units back for customer %s: %s", customer_id, lines)


def get_customer_order(*, customer_id: int, order_id: int) -> Order:
    """The order as written, or as queued (a queue-mode flash sale). Someone
    else's order and a missing one look the same: 404."""
    order = queued_or_written_order(customer_id=customer_id, order_id=order_id)
    if order is None:
        raise OrderNotFound()
    return order
