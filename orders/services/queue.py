"""Queue-mode checkout, for a flash sale the database cannot take one order at a
time: an admitted checkout is handed to Kafka (the 202 waits for the broker's
acknowledgement) and `write_queued_orders` writes the queue in batches, one
transaction per batch (group commit).

Redis holds what the API needs before an order is written, for a day:

  queue:ids                          order ids taken from the orders' own
                                     sequence, a hundred at a time
  queue:key:{customer}:{key}         the order id given to this Idempotency-Key
  queue:order:{id}                   the queued request, until it is written
  queue:depth                        hash SKU -> requests admitted, not yet written
"""

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from confluent_kafka import KafkaException, Producer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from django_redis import get_redis_connection
from psycopg.types.json import Jsonb
from redis.exceptions import RedisError

from cart.services import clear_carts
from core.db import copy_rows
from core.kafka import client_config
from inventory import gate
from inventory.models import Stock
from inventory.services import lock_stock
from orders.exceptions import IdempotencyKeyReused, QueueUnavailable
from orders.metrics import (
    ORDERS_CREATED,
    QUEUE_BATCH_SECONDS,
    QUEUE_BATCH_SIZE,
    QUEUE_ORDERS_REJECTED,
    QUEUE_ORDERS_WRITTEN,
)
from orders.models import Order, OrderItem, OrderStatus
from orders.services.slots import count_pending_orders
from outbox.services import NewEvent, record_events
from shop.models import Product

logger = logging.getLogger(__name__)

QUEUED = "QUEUED"  # the status the API shows before the writer has written the order
ID_BLOCK = 100
KEPT_SECONDS = 24 * 3600
IDS_KEY = "queue:ids"
DEPTH_KEY = "queue:depth"


def key_key(customer_id: int, idempotency_key: str) -> str:
    return f"queue:key:{customer_id}:{idempotency_key}"


def order_key(order_id: int) -> str:
    return f"queue:order:{order_id}"


@dataclass(frozen=True)
class QueuedLine:
    sku: str
    name: str
    quantity: int
    unit_price: int


@dataclass(frozen=True)
class QueuedRequest:
    order_id: int
    customer_id: int
    idempotency_key: str
    request_hash: str
    currency: str
    lines: list[QueuedLine]
    gated: dict[str, int] = field(default_factory=dict)  # units the gate let through
    queue_sku: str = ""  # the sale's SKU: the Kafka key, and whose queue depth it counts in
    shipping_address: dict | None = None

    @property
    def total(self) -> int:
        return sum(line.quantity * line.unit_price for line in self.lines)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> "QueuedRequest":
        data = json.loads(raw)
        data["lines"] = [QueuedLine(**line) for line in data["lines"]]
        return cls(**data)

    def as_order(self, *, status: str = QUEUED) -> Order:
        """The order as the API shows it before it is written."""
        order = Order(
            id=self.order_id, customer_id=self.customer_id, idempotency_key=self.idempotency_key,
            request_hash=self.request_hash, status=status, total_amount=self.total, currency=self.currency,
            shipping_address=self.shipping_address,
        )
        order._prefetched_objects_cache = {"items": self.items(order), "refunds": []}
        return order

    def items(self, order: Order) -> list[OrderItem]:
        return [
            OrderItem(order=order, product_id=li.sku, name=li.name, quantity=li.quantity, unit_price=li.unit_price)
            for li in self.lines
        ]


def _redis():
    return get_redis_connection("default")


def allocate_order_id() -> int:
    """An id from the orders' own sequence, so that queued and direct orders never
    collide: one statement fetches a hundred, Redis hands them out."""
    conn = _redis()
    raw = conn.lpop(IDS_KEY)
    if raw is not None:
        return int(raw)
    # nextval() of the table's sequence: the ORM has no word for it.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [Order._meta.db_table, ID_BLOCK],
        )
        ids = [row[0] for row in cursor.fetchall()]
    conn.rpush(IDS_KEY, *ids[1:])
    return ids[0]


_producer: Producer | None = None
_producer_lock = threading.Lock()


def _queue_producer() -> Producer:
    global _producer
    with _producer_lock:
        if _producer is None:
            _producer = Producer(
                client_config(
                    **{
                        "acks": "all",
                        "enable.idempotence": True,
                        "linger.ms": 0,
                        "message.timeout.ms": settings.QUEUE_ADMIT_TIMEOUT_MS,
                        "allow.auto.create.topics": False,
                    }
                )
            )
        return _producer


def _send(request: QueuedRequest, *, partition_key: str) -> None:
    """Produce the request and wait for the broker's acknowledgement (acks=all).
    librdkafka reports every message within message.timeout.ms, delivered or
    not, so an answer always comes: only a delivered request is a 202."""
    producer = _queue_producer()
    delivered = threading.Event()
    outcome: list = []

    def report(error, message) -> None:
        outcome.append(error)
        delivered.set()

    try:
        producer.produce(
            settings.KAFKA_CHECKOUT_TOPIC, key=partition_key, value=request.to_json(), on_delivery=report
        )
    except (BufferError, KafkaException) as error:
        raise QueueUnavailable() from error
    deadline = time.monotonic() + settings.QUEUE_ADMIT_TIMEOUT_MS / 1000 + 2
    while not delivered.is_set() and time.monotonic() < deadline:
        producer.poll(0.005)  # serves every thread's reports: each sets its own event
    if not delivered.is_set() or outcome[0] is not None:
        raise QueueUnavailable()


def queue_checkout(
    *, customer_id: int, idempotency_key: str, lines: list[QueuedLine], request_hash: str,
    gated: dict[str, int], partition_key: str, shipping_address: dict | None = None,
) -> tuple[Order, bool]:
    """Hand an admitted checkout to the queue: (the order as the API shows it,
    replayed). Raises QueueUnavailable (the caller gives the gate units back)."""
    conn = _redis()
    try:
        known = conn.get(key_key(customer_id, idempotency_key))
        if known is not None:
            return _replay(int(known), customer_id, request_hash), True
        order_id = allocate_order_id()
        request = QueuedRequest(
            order_id, customer_id, idempotency_key, request_hash, settings.SHOP_CURRENCY, lines, gated, partition_key,
            shipping_address,
        )
        if not conn.set(key_key(customer_id, idempotency_key), order_id, nx=True, ex=KEPT_SECONDS):
            known = conn.get(key_key(customer_id, idempotency_key))  # a twin request won the key
            return _replay(int(known), customer_id, request_hash), True
        with conn.pipeline(transaction=False) as pipe:
            pipe.set(order_key(order_id), request.to_json(), ex=KEPT_SECONDS)
            pipe.hincrby(DEPTH_KEY, partition_key, 1)
            pipe.execute()
    except RedisError as error:
        raise QueueUnavailable() from error
    try:
        # Keyed by the sale's SKU: a hot SKU's requests are written in arrival order by one writer.
        _send(request, partition_key=partition_key)
    except QueueUnavailable:
        with conn.pipeline(transaction=False) as pipe:
            pipe.delete(key_key(customer_id, idempotency_key), order_key(order_id))
            pipe.hincrby(DEPTH_KEY, partition_key, -1)
            pipe.execute()
        raise
    return request.as_order(), False


def _replay(order_id: int, customer_id: int, request_hash: str) -> Order:
    order = queued_or_written_order(customer_id=customer_id, order_id=order_id)
    if order is None:
        raise QueueUnavailable()  # the key's order is neither queued nor written: Redis lost it
    if order.request_hash != request_hash:
        raise IdempotencyKeyReused(order_id=order_id)
    return order


def queue_depths() -> dict[str, int]:
    """Per queue-mode SKU, the requests admitted and not yet written."""
    return {sku.decode(): max(int(count), 0) for sku, count in _redis().hgetall(DEPTH_KEY).items()}


def queued_or_written_order(*, customer_id: int, order_id: int) -> Order | None:
    """The customer's order as written, else as queued; None when neither."""
    order = Order.objects.filter(id=order_id, customer_id=customer_id).prefetch_related("items", "refunds").first()
    if order is not None:
        return order
    raw = _redis().get(order_key(order_id))
    if raw is None:
        return None
    request = QueuedRequest.from_json(raw)
    return request.as_order() if request.customer_id == customer_id else None


@dataclass
class BatchResult:
    written: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)  # order id -> reason
    already: list[int] = field(default_factory=list)  # redelivered: written before
    duplicates: list[QueuedRequest] = field(default_factory=list)  # a key that has its order under another id


def write_batch(requests: list[QueuedRequest]) -> BatchResult:
    """Write a batch of queued checkouts in one transaction: the stock of each
    SKU reserved with one conditional UPDATE for the batch's sum, the orders,
    their items and their events with one INSERT each. Requests the stock cannot
    cover (the gate drifted) or whose product went inactive are written as
    REJECTED, in arrival order. A redelivered request finds its order and
    changes nothing."""
    started = time.perf_counter()
    result = BatchResult()
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
        _insert(fresh, accepted, result, now)
        result.written = [request.order_id for request in accepted]
        transaction.on_commit(lambda: _after_commit(fresh, result))
    QUEUE_BATCH_SIZE.observe(len(requests))
    QUEUE_BATCH_SECONDS.observe(time.perf_counter() - started)
    return result


def _not_yet_written(requests: list[QueuedRequest], result: BatchResult) -> list[QueuedRequest]:
    """The requests with no order yet: a redelivered request finds its order by
    id; a key whose Redis record expired and came again finds it by (customer, key)."""
    by_id: dict[int, QueuedRequest] = {}
    for request in requests:
        by_id.setdefault(request.order_id, request)
    written_ids = set(Order.objects.filter(id__in=list(by_id)).values_list("id", flat=True))
    candidates = [request for order_id, request in by_id.items() if order_id not in written_ids]
    customers, keys_given = {r.customer_id for r in candidates}, {r.idempotency_key for r in candidates}
    written_keys = set(
        Order.objects.filter(customer_id__in=customers, idempotency_key__in=keys_given).values_list(
            "customer_id", "idempotency_key"
        )
    )
    fresh, keys = [], set()
    for request in candidates:
        key = (request.customer_id, request.idempotency_key)
        if key in written_keys or key in keys:
            result.duplicates.append(request)
        else:
            keys.add(key)
            fresh.append(request)
    result.already = sorted(written_ids)
    return fresh


def _reserve(accepted: list[QueuedRequest]) -> None:
    """The stock rule, once per SKU for the batch: the rows are locked and the
    demand was checked, so each conditional UPDATE takes its units."""
    demand: dict[str, int] = {}
    for request in accepted:
        for line in request.lines:
            demand[line.sku] = demand.get(line.sku, 0) + line.quantity
    for sku in sorted(demand):
        units = demand[sku]
        taken = Stock.objects.filter(product_id=sku, available__gte=units).update(
            available=F("available") - units, reserved=F("reserved") + units
        )
        if not taken:  # cannot happen under the lock; never write orders the stock does not cover
            raise RuntimeError(f"stock of {sku} moved under its lock")


def _insert(fresh: list[QueuedRequest], accepted: list[QueuedRequest], result: BatchResult, now) -> None:
    # Orders and items by COPY (core/db.py copy_rows), the one place the shop
    # writes rows past the ORM: with bulk_create, compiling the INSERTs and
    # quoting their 8,500 values was a third of the writer's profile, and it
    # drained 10,000 queued orders in 2.5-3.6 s; with COPY in 1.7-1.9 s
    # (107 us of writer CPU per order; bench/queue.py part 1 for the figures).
    expires_at = now + timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT_SECONDS)
    orders, items, events = [], [], []
    for request in fresh:
        reason = result.rejected.get(request.order_id, "")
        status = OrderStatus.REJECTED if reason else OrderStatus.PENDING_PAYMENT
        orders.append((request.order_id, request.customer_id, request.idempotency_key, request.request_hash,
                       str(status), request.total, request.currency, now, expires_at, reason,
                       Jsonb(request.shipping_address) if request.shipping_address is not None else None))  # fmt: skip
        items += [(request.order_id, li.sku, li.name, li.quantity, li.unit_price) for li in request.lines]
        lines = [asdict(line) for line in request.lines]
        data = {"order_id": request.order_id, "customer_id": request.customer_id, "items": lines,
                "total": request.total, "currency": request.currency,
                "shipping_address": request.shipping_address}  # fmt: skip
        if reason:
            events.append(NewEvent("order", request.order_id, "OrderRejected", {**data, "reason": reason}))
        else:
            events.append(NewEvent("order", request.order_id, "OrderCreated",
                                   {**data, "expires_at": expires_at.isoformat()}))  # fmt: skip
    copy_rows(Order, ORDER_COLUMNS, orders)
    copy_rows(OrderItem, ITEM_COLUMNS, items)
    record_events(events)
    count_pending_orders(customer_ids=[request.customer_id for request in accepted])


ORDER_COLUMNS = ["id", "customer", "idempotency_key", "request_hash", "status", "total_amount", "currency",
                 "created_at", "expires_at", "rejection_reason", "shipping_address"]  # fmt: skip
ITEM_COLUMNS = ["order", "product", "name", "quantity", "unit_price"]


def _after_commit(fresh: list[QueuedRequest], result: BatchResult) -> None:
    """Best effort, once the orders are written, a round-trip or two for the whole
    batch: carts cleared and replay markers set for the written orders, gate
    units back for the rejected ones (and for duplicates of a written key), the
    queued copies dropped."""
    ORDERS_CREATED.inc(len(result.written))
    QUEUE_ORDERS_WRITTEN.inc(len(result.written))
    QUEUE_ORDERS_REJECTED.inc(len(result.rejected))
    written = [request for request in fresh if request.order_id not in result.rejected]
    handed_back = [request for request in fresh if request.order_id in result.rejected] + result.duplicates
    done = fresh + result.duplicates
    try:
        clear_carts(customer_ids=[request.customer_id for request in written])
        gate.mark_orders_exist(
            [(request.customer_id, request.idempotency_key, request.order_id) for request in written if request.gated]
        )
        for request in handed_back:
            if request.gated:
                gate.release(customer_id=request.customer_id, lines=request.gated)
        if done:
            per_sku: dict[str, int] = {}
            for request in done:
                sku = request.queue_sku or min(line.sku for line in request.lines)
                per_sku[sku] = per_sku.get(sku, 0) + 1
            with _redis().pipeline(transaction=False) as pipe:
                pipe.delete(*[order_key(request.order_id) for request in done])
                for sku, count in per_sku.items():
                    pipe.hincrby(DEPTH_KEY, sku, -count)
                pipe.execute()
    except Exception:
        logger.exception("after-write clean-up failed for a batch of %s queued orders", len(done))
