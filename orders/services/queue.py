"""Queue-mode checkout, for a flash sale the database cannot take one order at a
time: an admitted checkout is handed to Kafka (the 202 waits for the broker's
acknowledgement) and `write_queued_orders` writes the queue in batches, one
transaction per batch (group commit).

Redis holds what the API needs before an order is written, for a day:

  queue:key:{customer}:{key}         the order id given to this Idempotency-Key
  queue:order:{id}                   the queued request, until it is written
  queue:pending:{sku}                sorted set: order ids admitted and not yet
                                     written, scored by admission time (depth,
                                     and requests stale past QUEUE_STALE_AFTER_SECONDS)
  queue:skus                         the SKUs that have a pending set

A queued order's id comes from the orders' own sequence, a hundred at a time
per process (allocate_order_id). Redis is not the truth: every new key is
confirmed against the database before its records are written (one script,
queue_hand_off.lua), and the writer's clean-up of a batch
(carts, replay markers, gate units, pending sets) happens once per request
however often the batch is delivered (queue_done.lua, gate.release_once).
"""

import json
import logging
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_redis import get_redis_connection
from psycopg.types.json import Jsonb
from redis.exceptions import RedisError

from cart import storage
from cart.storage import cart_key, taken_key
from core.db import copy_rows
from core.hotcache import hot_cache
from core.redis_scripts import compose, load_lua, run_script
from inventory import gate
from inventory.services import lock_stock, reserve_stock
from inventory.services.flash_sales import queued_skus
from orders.exceptions import QueueUnavailable
from orders.metrics import (
    ORDERS_CREATED,
    QUEUE_BATCH_SECONDS,
    QUEUE_BATCH_SIZE,
    QUEUE_ORDERS_REJECTED,
    QUEUE_ORDERS_WRITTEN,
)
from orders.models import Order, OrderItem, OrderStatus, QueuedOrderAlias
from orders.queue_producer import queue_producer
from orders.services.builder import BuiltOrder, OrderDraft, PricedLine, build_order
from orders.services.idempotency import order_under_key, same_request
from orders.services.slots import count_pending_orders
from outbox.services import record_events
from shop.models import Product

logger = logging.getLogger(__name__)

QUEUED = "QUEUED"  # the status the API shows before the writer has written the order
ID_BLOCK = 100
KEPT_SECONDS = 24 * 3600
SKUS_KEY = "queue:skus"
_DONE = compose(storage.LUA, load_lua("orders", "queue_done"))
_HAND_OFF = load_lua("orders", "queue_hand_off")


def key_key(customer_id: int, idempotency_key: str) -> str:
    return f"queue:key:{customer_id}:{idempotency_key}"


def order_key(order_id: int) -> str:
    return f"queue:order:{order_id}"


def pending_key(sku: str) -> str:
    return f"queue:pending:{sku}"


@dataclass(frozen=True)
class QueuedRequest:
    """An admitted checkout on its way to the writer: the order's draft
    (orders/services/builder.py), flat as it travels in Kafka, and the id the
    shopper was given."""

    order_id: int
    customer_id: int
    idempotency_key: str
    request_hash: str
    currency: str
    lines: list[PricedLine]
    gated: dict[str, int] = field(default_factory=dict)  # units the gate let through
    queue_sku: str = ""  # the sale's SKU: the Kafka key, and whose queue depth it counts in
    shipping_address: dict | None = None
    payment_seconds: int = 0  # 0 in a request queued before the field: ORDER_PAYMENT_TIMEOUT_SECONDS
    client_address: str = ""

    @classmethod
    def of(cls, order_id: int, draft: OrderDraft, *, gated: dict[str, int], queue_sku: str) -> "QueuedRequest":
        return cls(
            order_id, draft.customer_id, draft.idempotency_key, draft.request_hash, draft.currency, draft.lines,
            gated, queue_sku, draft.shipping_address, draft.payment_seconds, draft.client_address,
        )

    @property
    def draft(self) -> OrderDraft:
        return OrderDraft(
            self.customer_id, self.idempotency_key, self.lines, self.currency, self.shipping_address,
            self.payment_seconds or settings.ORDER_PAYMENT_TIMEOUT_SECONDS, self.client_address,
        )

    def build(self, *, now: datetime, rejection: str = "") -> BuiltOrder:
        return build_order(self.draft, now=now, request_hash=self.request_hash, takes_holds=False, rejection=rejection)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> "QueuedRequest":
        data = json.loads(raw)
        data["lines"] = [PricedLine(**line) for line in data["lines"]]
        return cls(**data)

    def as_order(self) -> Order:
        """The order as the API shows it before it is written: QUEUED, its payment
        deadline not yet running."""
        built = self.build(now=timezone.now())
        order = Order(id=self.order_id, **{**built.fields, "status": QUEUED, "expires_at": None})
        order._prefetched_objects_cache = {"items": [OrderItem(order=order, **i) for i in built.items], "refunds": []}
        return order


def _redis():
    return get_redis_connection("default")


class _IdBlock:
    """Ids from the orders' own sequence, so that queued and direct orders never
    collide: one statement takes a hundred, handed out from this process's
    memory (unused ones are gaps, as a rolled-back insert leaves). A forked
    child never hands out its parent's: the block belongs to the process that
    took it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: list[int] = []
        self._pid = 0

    def take(self) -> int:
        with self._lock:
            if self._pid != os.getpid():
                self._ids, self._pid = [], os.getpid()
            if not self._ids:
                # nextval() of the table's sequence: the ORM has no word for it.
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                        [Order._meta.db_table, ID_BLOCK],
                    )
                    self._ids = [row[0] for row in reversed(cursor.fetchall())]
            return self._ids.pop()


_ids = _IdBlock()


def allocate_order_id() -> int:
    return _ids.take()


def refuse_while_broker_down(*, customer_id: int) -> None:
    """QueueUnavailable for a cart with a queue-mode SKU while this process's
    breaker says the queue's broker is down: before the gate takes units, the
    address is read or the cart priced (one Redis read, no SQL), so that an
    outage's refusals cost the web tier little. Nothing when the breaker is closed."""
    queue = queued_skus()
    if not queue or not queue_producer().breaker.refusing():
        return
    lines = storage.read_lines(customer_id=customer_id, generation=hot_cache.ensure_generation())
    if not queue.isdisjoint(lines):
        queue_producer().refuse_early()


def queue_checkout(*, draft: OrderDraft, gated: dict[str, int], partition_key: str) -> tuple[Order, bool]:
    """Hand an admitted checkout to the queue: (the order as the API shows it,
    replayed). Raises QueueUnavailable (the caller gives the gate units back)
    with nothing of the request left in Redis."""
    producer = queue_producer()
    producer.refuse_early()  # the broker is known to be down: no thread held, nothing written
    customer_id, idempotency_key, request_hash = draft.customer_id, draft.idempotency_key, draft.request_hash
    try:
        # Redis may have forgotten the key (restarted, evicted): the database is the truth.
        written = order_under_key(customer_id=customer_id, idempotency_key=idempotency_key)
        if written is not None:
            return same_request(written, request_hash), True
        order_id = allocate_order_id()
        request = QueuedRequest.of(order_id, draft, gated=gated, queue_sku=partition_key)
        body = request.to_json()
        keys = [key_key(customer_id, idempotency_key), order_key(order_id), pending_key(partition_key), SKUS_KEY]
        known = run_script(_HAND_OFF, keys=keys, args=[order_id, body, time.time(), KEPT_SECONDS, partition_key])
    except RedisError as error:
        raise QueueUnavailable() from error
    if known is not None:  # a replay, or a twin request won the key
        order = queued_or_written_order(customer_id=customer_id, order_id=int(known))
        if order is None:
            raise QueueUnavailable()  # the key's order is neither queued nor written: Redis lost it
        return same_request(order, request_hash), True
    try:
        # Keyed by the sale's SKU: a hot SKU's requests are written in arrival order by one writer.
        producer.send(topic=settings.KAFKA_CHECKOUT_TOPIC, key=partition_key, value=body)
    except BaseException:
        _forget_request(customer_id, idempotency_key, order_id, partition_key)
        raise
    return request.as_order(), False


def _forget_request(customer_id: int, idempotency_key: str, order_id: int, sku: str) -> None:
    """Undo a request's Redis records: Kafka did not take it, a retry starts afresh."""
    try:
        with _redis().pipeline(transaction=False) as pipe:
            pipe.delete(key_key(customer_id, idempotency_key), order_key(order_id))
            pipe.zrem(pending_key(sku), order_id)
            pipe.execute()
    except RedisError:
        logger.exception("could not undo the Redis records of queued order %s", order_id)


def queue_depths() -> dict[str, int]:
    """Per SKU, the requests admitted and not yet written."""
    return _per_sku(lambda pipe, key: pipe.zcard(key))


def stale_queued() -> dict[str, int]:
    """Per SKU, the requests admitted more than QUEUE_STALE_AFTER_SECONDS ago and
    still not written: the writer is down or far behind, or the broker lost them."""
    before = time.time() - settings.QUEUE_STALE_AFTER_SECONDS
    return _per_sku(lambda pipe, key: pipe.zcount(key, "-inf", before))


def _per_sku(count) -> dict[str, int]:
    skus = sorted(sku.decode() for sku in _redis().smembers(SKUS_KEY))
    with _redis().pipeline(transaction=False) as pipe:
        for sku in skus:
            count(pipe, pending_key(sku))
        return dict(zip(skus, pipe.execute(), strict=True))


def forget_queue(*, sku: str) -> None:
    """Drop a SKU's pending set (benchmarks and drills that start a sale afresh)."""
    with _redis().pipeline(transaction=False) as pipe:
        pipe.delete(pending_key(sku))
        pipe.srem(SKUS_KEY, sku)
        pipe.execute()


def queued_or_written_order(*, customer_id: int, order_id: int) -> Order | None:
    """The customer's order as written, else as queued, else the order a
    duplicate queued id leads to (QueuedOrderAlias); None when none."""
    orders = Order.objects.filter(customer_id=customer_id).prefetch_related("items", "refunds")
    order = orders.filter(id=order_id).first()
    if order is not None:
        return order
    raw = _redis().get(order_key(order_id))
    if raw is not None:
        request = QueuedRequest.from_json(raw)
        return request.as_order() if request.customer_id == customer_id else None
    alias = QueuedOrderAlias.objects.filter(queued_id=order_id).values_list("order_id", flat=True).first()
    return orders.filter(id=alias).first() if alias is not None else None


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
    their items and their events with one INSERT each. Requests the stock cannot
    cover (the gate drifted) or whose product went inactive are written as
    REJECTED, in arrival order. A redelivered request finds its order and
    changes nothing. The clean-up in Redis (finish_written_batch) runs on commit, or,
    without `clean_up_on_commit`, when the caller runs it (the queue's writer,
    while it writes the next batch)."""
    started = time.perf_counter()
    result = WrittenBatch()
    now = timezone.now()
    with transaction.atomic():
        fresh = _not_yet_written(requests, result)
        skus = sorted({line.sku for request in fresh for line in request.lines})
        active = set(Product.objects.filter(sku__in=skus, is_active=True).values_list("sku", flat=True))
        left = lock_stock(skus)  # SKU order, as every stock writer
        accepted: list[QueuedRequest] = []
        for request in fresh:
            if any(line.sku not in active for line in request.lines):
                result.rejected[request.order_id] = "sku_unavailable"
            elif any(left.get(line.sku, 0) < line.quantity for line in request.lines):
                result.rejected[request.order_id] = "out_of_stock"
            else:
                for line in request.lines:
                    left[line.sku] -= line.quantity
                accepted.append(request)
        _reserve(accepted)
        _insert(fresh, result, now)
        result.written = [request.order_id for request in accepted]
        result.outcomes += [(r, r.order_id, r.order_id not in result.rejected) for r in fresh]
        QueuedOrderAlias.objects.bulk_create(
            [QueuedOrderAlias(queued_id=r.order_id, order_id=order_id) for r, order_id, _ in result.outcomes
             if r.order_id != order_id],
            ignore_conflicts=True,
        )  # fmt: skip
        if clean_up_on_commit:
            transaction.on_commit(lambda: finish_written_batch(result))
    QUEUE_BATCH_SIZE.observe(len(requests))
    QUEUE_BATCH_SECONDS.observe(time.perf_counter() - started)
    return result


def _not_yet_written(requests: list[QueuedRequest], result: WrittenBatch) -> list[QueuedRequest]:
    """The requests with no order yet. A redelivered request finds its order by
    id; a key that came again under another id (Redis forgot it, the shopper
    retried) finds its order by (customer, key) and is a duplicate of it. Both
    go into result.outcomes, for the clean-up."""
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
    orders, items, events = [], [], []
    for request in fresh:
        built = request.build(now=now, rejection=result.rejected.get(request.order_id, ""))
        values = built.fields
        orders.append([request.order_id] + [values[name] for name in ORDER_FIELDS])
        if values["shipping_address"] is not None:
            orders[-1][ADDRESS_AT] = Jsonb(values["shipping_address"])
        orders[-1][STATUS_AT] = str(values["status"])
        items += [(request.order_id, *(item[name] for name in ITEM_FIELDS)) for item in built.items]
        events.append(built.event(request.order_id))
    copy_rows(Order, ["id", *ORDER_FIELDS], orders)
    copy_rows(OrderItem, ["order_id", *ITEM_FIELDS], items)
    record_events(events)
    count_pending_orders(customer_ids=[r.customer_id for r in fresh if r.order_id not in result.rejected])


ORDER_FIELDS = ["customer_id", "idempotency_key", "request_hash", "status", "total_amount", "currency", "created_at",
                "expires_at", "rejection_reason", "shipping_address", "hold_address", "holds_units"]  # fmt: skip
ADDRESS_AT, STATUS_AT = 1 + ORDER_FIELDS.index("shipping_address"), 1 + ORDER_FIELDS.index("status")
ITEM_FIELDS = ["product_id", "name", "quantity", "unit_price"]


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
    clean_up(result.outcomes)


CLEAN_UP_CHUNK = 64  # requests per clean-up call (see clean_up)


def clean_up(outcomes: list[tuple[QueuedRequest, int, bool]]) -> None:
    """(request, its order's id, written) per request: see finish_written_batch. In
    calls of CLEAN_UP_CHUNK requests: Redis runs one script at a time, and a
    whole batch's script held it long enough that every checkout's admission
    call waiting behind it showed in the tail (bench/README.md, "Figures behind
    code choices")."""
    for start in range(0, len(outcomes), CLEAN_UP_CHUNK):
        _clean_up(outcomes[start : start + CLEAN_UP_CHUNK])


def _clean_up(outcomes: list[tuple[QueuedRequest, int, bool]]) -> None:
    if not outcomes:
        return
    gate.mark_orders_exist(
        [(request.customer_id, request.idempotency_key, order_id) for request, order_id, written in outcomes
         if written and request.gated]
    )  # fmt: skip
    # Units back for what the database did not take under this id (rejected, or a duplicate of a written key).
    gate.release_once(
        [(f"queue:{request.order_id}", request.customer_id, request.gated) for request, order_id, written in outcomes
         if request.gated and (not written or order_id != request.order_id)]
    )  # fmt: skip
    keys, args = [], [settings.CART_TTL_SECONDS]
    for request, _, written in outcomes:
        sku = request.queue_sku or min(line.sku for line in request.lines)
        keys += [pending_key(sku), order_key(request.order_id), cart_key(request.customer_id),
                 taken_key(request.customer_id)]  # fmt: skip
        args += [request.order_id, int(written), request.idempotency_key]
    run_script(_DONE, keys=keys, args=args)
