"""The queue's writing (orders/services/queue_admission.py hands checkouts to
it; orders/queue_writer.py feeds it from Kafka): a batch of queued checkouts
in one transaction (group commit), then a clean-up in Redis (carts, replay
markers, gate units, pending sets) that happens once per request however often
the batch is delivered (queue_done.lua, gate.release_once).
"""

import logging
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from psycopg.types.json import Jsonb
from redis.exceptions import RedisError

from cart import storage
from cart.storage import cart_key, taken_key
from core.db import copy_rows
from core.redis_scripts import compose, load_lua, run_script
from core.sharding import clustered
from inventory import gate
from inventory.services import lock_stock, reserve_stock
from orders.locks import lock_pending_counts
from orders.metrics import (
    ORDERS_CREATED,
    QUEUE_BATCH_SECONDS,
    QUEUE_BATCH_SIZE,
    QUEUE_ORDERS_REJECTED,
    QUEUE_ORDERS_WRITTEN,
)
from orders.models import Order, OrderItem, OrderStatus, QueuedOrderAlias
from orders.services.queue_admission import QueuedRequest, claims_key, order_key, pending_key
from orders.services.slots import count_pending_orders
from outbox.services import NewEvent, record_events
from shop.models import Product
from shop.promotions import VoucherBatch

logger = logging.getLogger(__name__)

_DONE = compose(storage.LUA, load_lua("orders", "queue_done"))


@dataclass
class WrittenBatch:
    written: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)  # order id -> reason
    already: list[int] = field(default_factory=list)  # redelivered: written before
    duplicates: list[QueuedRequest] = field(default_factory=list)  # a key that has its order under another id
    # What the clean-up after the commit works on (finish_written_batch): every request of
    # the batch, redelivered ones included, with its order's id and whether it was written.
    outcomes: list[tuple[QueuedRequest, int, bool]] = field(default_factory=list)


def write_batch(requests: list[QueuedRequest], *, clean_up_on_commit: bool = True) -> WrittenBatch:
    """Write a batch of queued checkouts in one transaction: the stock of each
    SKU reserved with one conditional UPDATE for the batch's sum, the orders,
    their items and their events with one INSERT each, the vouchers' uses
    counted (shop.promotions.VoucherBatch). Requests the stock cannot cover (the
    gate drifted), whose product went inactive or whose voucher has no use left
    (for all, or for its shopper) are written as REJECTED, in arrival order. A redelivered request finds its order and
    changes nothing. The clean-up in Redis (finish_written_batch) runs on commit, or,
    without `clean_up_on_commit`, when the caller runs it (the queue's writer,
    while it writes the next batch)."""
    started = time.perf_counter()
    result = WrittenBatch()
    now = timezone.now()
    with transaction.atomic():
        fresh = not_yet_written(requests, result)
        skus = sorted({line.sku for request in fresh for line in request.lines})
        active = set(Product.objects.filter(sku__in=skus, is_active=True).values_list("sku", flat=True))
        # Locks as core/locks.py declares: shoppers' pending-order counters, vouchers, stock.
        lock_pending_counts(customer_ids=[r.customer_id for r in fresh])
        vouchers = VoucherBatch((r.voucher_id, r.customer_id) for r in fresh if r.voucher_id)
        left = lock_stock(skus)  # SKU order, as every stock writer
        accepted: list[QueuedRequest] = []
        for request in fresh:
            voucher_id = request.voucher_id
            if any(line.sku not in active for line in request.lines):
                result.rejected[request.order_id] = "sku_unavailable"
            elif any(left.get(line.sku, 0) < line.quantity for line in request.lines):
                result.rejected[request.order_id] = "out_of_stock"
            elif voucher_id and not vouchers.take(
                order_id=request.order_id, voucher_id=voucher_id, customer_id=request.customer_id
            ):
                result.rejected[request.order_id] = "voucher_used_up"
            else:
                for line in request.lines:
                    left[line.sku] -= line.quantity
                accepted.append(request)
        vouchers.save()
        _reserve(accepted)
        _insert(fresh, result, now)
        result.written = [request.order_id for request in accepted]
        result.outcomes += [(r, r.order_id, r.order_id not in result.rejected) for r in fresh]
        QueuedOrderAlias.objects.bulk_create(
            [
                QueuedOrderAlias(queued_id=r.order_id, order_id=order_id)
                for r, order_id, _ in result.outcomes
                if r.order_id != order_id
            ],
            ignore_conflicts=True,
        )
        if clean_up_on_commit:
            transaction.on_commit(lambda: finish_written_batch(result))
    QUEUE_BATCH_SIZE.observe(len(requests))
    QUEUE_BATCH_SECONDS.observe(time.perf_counter() - started)
    return result


def not_yet_written(requests: list[QueuedRequest], result: WrittenBatch) -> list[QueuedRequest]:
    """The requests with no order yet. A redelivered request finds its order by
    id; a key that came again under another id (Redis forgot it, the shopper
    retried) finds its order by (customer, key) and is a duplicate of it. Both
    go into result.outcomes, for the clean-up (the writer's, and the stale-queue
    sweeper's: orders/services/queue_sweeper.py)."""
    by_id: dict[int, QueuedRequest] = {}
    for request in requests:
        by_id.setdefault(request.order_id, request)
    written = dict(Order.objects.filter(id__any=list(by_id)).values_list("id", "status"))
    candidates = [request for order_id, request in by_id.items() if order_id not in written]
    customers, keys_given = {r.customer_id for r in candidates}, {r.idempotency_key for r in candidates}
    written_keys = {
        (customer_id, key): (order_id, status)
        for customer_id, key, order_id, status in Order.objects.filter(
            customer_id__any=list(customers), idempotency_key__any=list(keys_given)
        ).values_list("customer_id", "idempotency_key", "id", "status")
    }
    fresh, keys = [], {}
    for request in candidates:
        key = (request.customer_id, request.idempotency_key)
        if key in written_keys:
            order_id, status = written_keys[key]
            result.outcomes.append((request, order_id, status != OrderStatus.REJECTED))
            result.duplicates.append(request)
        elif key in keys:  # twice in this batch: the first one is written
            result.outcomes.append((request, keys[key].order_id, True))
            result.duplicates.append(request)
        else:
            keys[key] = request
            fresh.append(request)
    result.already = sorted(written)
    result.outcomes += [(by_id[i], i, status != OrderStatus.REJECTED) for i, status in written.items()]
    return fresh


def _reserve(accepted: list[QueuedRequest]) -> None:
    """The batch's demand per SKU, through the one stock writer: the rows are
    locked and the demand checked, so each SKU's conditional UPDATE takes its
    units (an OutOfStock here would roll the whole batch back)."""
    demand: dict[str, int] = {}
    for request in accepted:
        for line in request.lines:
            demand[line.sku] = demand.get(line.sku, 0) + line.quantity
    reserve_stock(lines=demand)


def _insert(fresh: list[QueuedRequest], result: WrittenBatch, now: datetime) -> None:
    """Each request built as checkout builds its order (orders/services/builder.py),
    the rows sent by COPY (core/db.py copy_rows; docs/architecture.md lists the
    statements the shop writes past the ORM): with bulk_create, compiling the INSERTs and quoting their
    8,500 values was a third of the writer's profile, and it drained 10,000
    queued orders in 2.5-3.6 s; with COPY in 1.7-1.9 s (bench/queue.py part 1)."""
    orders, items, events = order_rows(fresh, result.rejected, now)
    copy_rows(Order, ["id", *ORDER_FIELDS], orders)
    copy_rows(OrderItem, ["order_id", *ITEM_FIELDS], items)
    record_events(events)
    count_pending_orders(customer_ids=[r.customer_id for r in fresh if r.order_id not in result.rejected])


def order_rows(
    fresh: list[QueuedRequest], rejected: dict[int, str], now: datetime
) -> tuple[list[list], list[tuple], list[NewEvent]]:
    """The orders' rows (id, *ORDER_FIELDS), their items' rows (order_id, *ITEM_FIELDS)
    and their events, as the writer writes them (bench/queue.py writes the same raw)."""
    orders, items, events = [], [], []
    for request in fresh:
        built = request.build(now=now, rejection=rejected.get(request.order_id, ""))
        values = built.fields
        orders.append([request.order_id] + [values[name] for name in ORDER_FIELDS])
        if values["shipping_address"] is not None:
            orders[-1][ADDRESS_AT] = Jsonb(values["shipping_address"])
        orders[-1][STATUS_AT] = str(values["status"])
        orders[-1][DISCOUNTS_AT] = Jsonb(values["discounts"])
        if values["shipping"] is not None:
            orders[-1][SHIPPING_AT] = Jsonb(values["shipping"])
        items += [(request.order_id, *(item[name] for name in ITEM_FIELDS)) for item in built.items]
        events.append(built.event(request.order_id))
    return orders, items, events


ORDER_FIELDS = [
    "customer_id",
    "idempotency_key",
    "request_hash",
    "status",
    "total_amount",
    "currency",
    "created_at",
    "expires_at",
    "rejection_reason",
    "shipping_address",
    "hold_address",
    "holds_units",
    "discounts",
    "prices_include_tax",
    "tax_country",
    "tax_amount",
    "shipping_amount",
    "shipping",
]
ADDRESS_AT, STATUS_AT = 1 + ORDER_FIELDS.index("shipping_address"), 1 + ORDER_FIELDS.index("status")
DISCOUNTS_AT, SHIPPING_AT = 1 + ORDER_FIELDS.index("discounts"), 1 + ORDER_FIELDS.index("shipping")
ITEM_FIELDS = ["product_id", "name", "quantity", "unit_price", "discount", "tax_rate", "tax", "gross"]


def finish_written_batch(result: WrittenBatch) -> None:
    """Once the orders are written, two round-trips per CLEAN_UP_CHUNK requests:
    replay markers set for the written orders; the carts checkout took given
    back and gate units back for the rejected ones (and units for duplicates);
    queued copies dropped. Each
    request's clean-up happens once however often the batch is delivered, so
    it runs for redelivered requests too: a writer killed before this ran, or
    a Redis error here (raised: the writer keeps the batch and retries it),
    cleans up when the batch comes again."""
    if settings.QUEUE_WRITER_DRILL == "kill-after-commit":  # a fault drill: die between commit and clean-up
        os.kill(os.getpid(), signal.SIGKILL)
    ORDERS_CREATED.inc(len(result.written))
    QUEUE_ORDERS_WRITTEN.inc(len(result.written))
    QUEUE_ORDERS_REJECTED.inc(len(result.rejected))
    clean_up(result.outcomes, used_up={i for i, reason in result.rejected.items() if reason == "voucher_used_up"})


CLEAN_UP_CHUNK = 64  # requests per clean-up call (see clean_up)


def clean_up(outcomes: list[tuple[QueuedRequest, int, bool]], *, used_up: set[int] = frozenset()) -> None:
    """(request, its order's id, written) per request: see finish_written_batch. In
    calls of CLEAN_UP_CHUNK requests: Redis runs one script at a time, and a
    whole batch's script held it long enough that every checkout's admission
    call waiting behind it showed in the tail (bench/README.md, "Figures behind
    code choices")."""
    for start in range(0, len(outcomes), CLEAN_UP_CHUNK):
        _clean_up(outcomes[start : start + CLEAN_UP_CHUNK], used_up)


def _clean_up(outcomes: list[tuple[QueuedRequest, int, bool]], used_up: set[int]) -> None:
    if not outcomes:
        return
    gate.mark_orders_exist(
        [
            (request.customer_id, request.idempotency_key, order_id)
            for request, order_id, written in outcomes
            if written and request.gated
        ]
    )
    # Units back for what the database did not take under this id (rejected, or a duplicate of a written key).
    gate.release_once(
        [
            (f"queue:{request.order_id}", request.customer_id, request.gated)
            for request, order_id, written in outcomes
            if request.gated and (not written or order_id != request.order_id)
        ]
    )
    carts_here = not clustered()
    keys, args = [], [settings.CART_TTL_SECONDS if carts_here else ""]
    for request, _, written in outcomes:
        sku = request.queue_sku or min(line.sku for line in request.lines)
        keys += [
            pending_key(sku),
            order_key(request.order_id),
            cart_key(request.customer_id),
            taken_key(request.customer_id),
            claims_key(sku),
        ]
        outcome = "1" if written else "v" if request.order_id in used_up else "0"
        args += [request.order_id, outcome, request.idempotency_key]
    cleaned = run_script(_DONE, keys=keys, args=args)
    if not carts_here:
        _give_back_on_cluster(outcomes, {int(order_id) for order_id in cleaned}, used_up)


def _give_back_on_cluster(outcomes: list, cleaned: set[int], used_up: set[int]) -> None:
    """The clean-up's give-back when the carts are on a Redis Cluster: the carts of
    the requests just cleaned up that wrote no order (once: only those the script
    took out of the pending set now). A failure here leaves a cart taken for
    TAKEN_CART_TTL_SECONDS, as a checkout's failed give-back does."""
    for drop_voucher in (False, True):
        carts = [
            (request.customer_id, request.idempotency_key)
            for request, _, _ in outcomes
            if request.order_id in cleaned and (request.order_id in used_up) == drop_voucher
        ]
        try:
            storage.give_back(carts, drop_voucher=drop_voucher)
        except RedisError:
            logger.exception("could not give back %d carts of queued checkouts", len(carts))
