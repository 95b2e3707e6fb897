"""Queue-mode checkout, for a flash sale the database cannot take one order at a
time: an admitted checkout is handed to Kafka (the 202 waits for the broker's
acknowledgement) and the queue's writer (orders/queue_writer.py,
orders/services/queue_writing.py) writes the queue in batches.

Redis holds what the API needs before an order is written, for a day:

  queue:key:{customer}:{key}         the order id given to this Idempotency-Key
  queue:order:{id}                   the queued request, until it is written
  queue:pending:{sku}                sorted set: order ids admitted and not yet
                                     written, scored by admission time (depth,
                                     and requests stale past QUEUE_STALE_AFTER_SECONDS)
  queue:skus                         the SKUs that have a pending set
  queue:claims:{sku}                 hash: per pending order id, its customer,
                                     key and gate units, with no TTL (the
                                     queued copy has one): what rejecting it
                                     needs if the copy is lost
  queue:resent:{id}                  set while a stale request's re-send is
                                     claimed (orders/services/queue_sweeper.py)

A queued order's id comes from the orders' own sequence, a hundred at a time
per process (allocate_order_id). Redis is not the truth: every new key is
confirmed against the database before its records are written (one script,
queue_hand_off.lua).
"""

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_redis import get_redis_connection
from redis.exceptions import RedisError

from cart import storage
from core.hotcache import hot_cache
from core.redis_scripts import load_lua, run_script
from inventory.services.flash_sales import queued_skus
from orders.exceptions import QueueUnavailable
from orders.models import Order, OrderItem, QueuedOrderAlias
from orders.queue_producer import queue_producer
from orders.services.builder import BuiltOrder, OrderCharges, OrderDraft, PricedLine, applied_voucher, build_order
from orders.services.idempotency import order_under_key, same_request

logger = logging.getLogger(__name__)

QUEUED = "QUEUED"  # the status the API shows before the writer has written the order
ID_BLOCK = 100
KEPT_SECONDS = 24 * 3600
SKUS_KEY = "queue:skus"
_HAND_OFF = load_lua("orders", "queue_hand_off")


def request_key(customer_id: int, idempotency_key: str) -> str:
    return f"queue:key:{customer_id}:{idempotency_key}"


def order_key(order_id: int) -> str:
    return f"queue:order:{order_id}"


def pending_key(sku: str) -> str:
    return f"queue:pending:{sku}"


def claims_key(sku: str) -> str:
    return f"queue:claims:{sku}"


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
    discounts: list[dict] = field(default_factory=list)  # as checkout priced the cart: the writer charges the same
    charges: dict = field(default_factory=dict)  # builder.OrderCharges as checkout priced them ({}: queued before them)

    @classmethod
    def of(cls, order_id: int, draft: OrderDraft, *, gated: dict[str, int], queue_sku: str) -> "QueuedRequest":
        return cls(
            order_id,
            draft.customer_id,
            draft.idempotency_key,
            draft.request_hash,
            draft.currency,
            draft.lines,
            gated,
            queue_sku,
            draft.shipping_address,
            draft.payment_seconds,
            draft.client_address,
            draft.discounts,
            asdict(draft.charges),
        )

    @property
    def draft(self) -> OrderDraft:
        return OrderDraft(
            self.customer_id,
            self.idempotency_key,
            self.lines,
            self.currency,
            self.shipping_address,
            self.payment_seconds or settings.ORDER_PAYMENT_TIMEOUT_SECONDS,
            self.client_address,
            self.discounts,
            OrderCharges(**self.charges),
        )

    @property
    def voucher_id(self) -> int | None:
        return applied_voucher(self.discounts)

    def build(self, *, now: datetime, rejection: str = "") -> BuiltOrder:
        return build_order(self.draft, now=now, request_hash=self.request_hash, takes_holds=False, rejection=rejection)

    def claim(self) -> bytes:
        """What the gate let through and for whom (queue:claims:{sku}): enough to
        reject the request, units back, if its queued copy is lost."""
        fields = [self.customer_id, self.idempotency_key, self.request_hash, self.currency, self.gated]
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_claim(cls, order_id: int, raw: bytes, *, queue_sku: str) -> "QueuedRequest":
        """The request as far as its claim tells: no lines, for a rejection and its clean-up."""
        customer_id, idempotency_key, request_hash, currency, gated = json.loads(raw)
        return cls(order_id, customer_id, idempotency_key, request_hash, currency, [], gated, queue_sku)

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
    lines = storage.read_cart(customer_id=customer_id, generation=hot_cache.ensure_generation()).lines
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
        keys = [
            request_key(customer_id, idempotency_key),
            order_key(order_id),
            pending_key(partition_key),
            SKUS_KEY,
            claims_key(partition_key),
        ]
        args = [order_id, body, time.time(), KEPT_SECONDS, partition_key, request.claim()]
        known = run_script(_HAND_OFF, keys=keys, args=args)
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
            pipe.delete(request_key(customer_id, idempotency_key), order_key(order_id))
            pipe.zrem(pending_key(sku), order_id)
            pipe.hdel(claims_key(sku), order_id)
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
        pipe.delete(pending_key(sku), claims_key(sku))
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
