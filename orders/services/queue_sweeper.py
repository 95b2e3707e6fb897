"""Every 202 resolves: the queued checkouts still unwritten QUEUE_STALE_AFTER_SECONDS
after their admission (orders/services/queue_admission.py stale_queued) are
resolved by the shop itself, from Celery beat on every node:

- sent to the writer again from their queued copy in Redis (the broker lost
  them: came back with an empty log), written once however often they arrive;
- where that copy is gone (evicted, expired, deleted), rejected `queue_lost`
  from their claim (queue:claims:{sku}), their gate units and cart given back.

The rejection is a REJECTED order under the queued id, so the orders' primary
key decides between the writer and the sweeper: whichever inserts the row
first wins, the other finds it, and the units go back once (gate.release_once
on the request's token, the same the writer uses).
"""

import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_redis import get_redis_connection

from orders.exceptions import QueueUnavailable
from orders.models import Order, OrderStatus, QueuedOrderAlias
from orders.queue_producer import queue_producer
from orders.services.queue_admission import SKUS_KEY, QueuedRequest, claims_key, order_key, pending_key
from orders.services.queue_writing import WrittenBatch, clean_up, not_yet_written
from outbox.services import NewEvent, record_events

logger = logging.getLogger(__name__)

RESEND_LIMIT = 1000  # stale requests handled per SKU and sweep: a long outage drains over several
QUEUE_LOST = "queue_lost"


def resent_key(order_id: int) -> str:
    return f"queue:resent:{order_id}"


@dataclass
class StaleResolved:
    resent: list[int] = field(default_factory=list)  # sent to the writer again from their Redis record
    written: list[int] = field(default_factory=list)  # written already: only their clean-up was left
    rejected: list[int] = field(default_factory=list)  # no queued copy: rejected queue_lost, units back
    lost: list[int] = field(default_factory=list)  # no copy, no claim, no order: nothing to act on (logged)


def resend_stale_queued() -> StaleResolved:
    """Resolve what stale_queued() counts. A request's re-send is claimed for
    QUEUE_STALE_AFTER_SECONDS (SET NX), so two sweeps at once (beat on every
    node) send it once, and a request the writer is merely slow to reach is sent
    again at most once a period; the writer writes it once by its order id
    (orders/services/queue_writing.py). One without its queued copy is resolved
    from the database and its claim (_resolve_without_copy)."""
    resolved = StaleResolved()
    before = time.time() - settings.QUEUE_STALE_AFTER_SECONDS
    redis = get_redis_connection("default")
    for sku in sorted(sku.decode() for sku in redis.smembers(SKUS_KEY)):
        ids = [int(i) for i in redis.zrangebyscore(pending_key(sku), "-inf", before, start=0, num=RESEND_LIMIT)]
        if not ids:
            continue
        with redis.pipeline(transaction=False) as pipe:
            for order_id in ids:
                pipe.get(order_key(order_id))
                pipe.hget(claims_key(sku), order_id)
            replies = pipe.execute()
        without_copy = {i: claim for i, raw, claim in zip(ids, replies[::2], replies[1::2], strict=True) if raw is None}
        copies = [(i, raw) for i, raw in zip(ids, replies[::2], strict=True) if raw is not None]
        with redis.pipeline(transaction=False) as pipe:
            for order_id, _ in copies:
                pipe.set(resent_key(order_id), 1, nx=True, ex=settings.QUEUE_STALE_AFTER_SECONDS)
            claimed = pipe.execute()
        mine = [(order_id, raw) for (order_id, raw), won in zip(copies, claimed, strict=True) if won]
        for n, (order_id, raw) in enumerate(mine):
            try:
                queue_producer().send(topic=settings.KAFKA_CHECKOUT_TOPIC, key=sku, value=raw)
            except QueueUnavailable:
                redis.delete(*[resent_key(i) for i, _ in mine[n:]])  # the next sweep tries them again
                logger.warning("stale queued checkouts not re-sent: the queue's broker is unavailable")
                return resolved
            resolved.resent.append(order_id)
        if without_copy:
            _resolve_without_copy(sku, without_copy, resolved)
    if resolved.resent:
        logger.warning("re-sent %s stale queued checkouts to the writer: %s", len(resolved.resent), resolved.resent)
    return resolved


def _resolve_without_copy(sku: str, claims: dict[int, bytes | None], resolved: StaleResolved) -> None:
    """Stale entries whose queued copy is gone. Written already (as themselves,
    or their key under another id): the writer's clean-up, which never ran, runs
    now. Not written and a claim left: rejected queue_lost, then cleaned up as the
    writer cleans up a rejection. Neither: logged for an operator."""
    requests = [QueuedRequest.from_claim(i, claim, queue_sku=sku) for i, claim in claims.items() if claim is not None]
    found = WrittenBatch()
    fresh = not_yet_written(requests, found)
    outcomes = found.outcomes
    resolved.written += sorted(request.order_id for request, _, _ in outcomes)
    for request in fresh:
        if _reject_lost(request):
            resolved.rejected.append(request.order_id)
            outcomes.append((request, request.order_id, False))
        # else the writer wrote it meanwhile: the next sweep finds it written
    clean_up(outcomes)
    if unclaimed := sorted(i for i, claim in claims.items() if claim is None):
        _written_or_lost(sku, unclaimed, resolved)
    if resolved.rejected:
        logger.warning("rejected queue_lost, their record gone: stale queued checkouts %s", resolved.rejected)


def _reject_lost(request: QueuedRequest) -> bool:
    """A REJECTED order under the request's id, with its OrderRejected event;
    False when an order holds the id or the key already (the writer was first)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            Order.objects.create(
                id=request.order_id,
                customer_id=request.customer_id,
                idempotency_key=request.idempotency_key,
                request_hash=request.request_hash,
                status=OrderStatus.REJECTED,
                total_amount=0,
                currency=request.currency,
                created_at=now,
                expires_at=now,
                rejection_reason=QUEUE_LOST,
            )
            items = [{"sku": sku, "quantity": quantity} for sku, quantity in sorted(request.gated.items())]
            data = {"order_id": request.order_id, "customer_id": request.customer_id, "items": items}
            record_events([NewEvent("order", request.order_id, "OrderRejected", {**data, "reason": QUEUE_LOST})])
    except IntegrityError:
        return False
    return True


def _written_or_lost(sku: str, order_ids: list[int], resolved: StaleResolved) -> None:
    """Entries with neither copy nor claim (queued before claims existed, or Redis
    lost both): written ones leave the pending set; the others are logged."""
    written = set(Order.objects.filter(id__in=order_ids).values_list("id", flat=True))
    written |= set(QueuedOrderAlias.objects.filter(queued_id__in=order_ids).values_list("queued_id", flat=True))
    resolved.written += sorted(written)
    resolved.lost += sorted(set(order_ids) - written)
    if written:
        get_redis_connection("default").zrem(pending_key(sku), *written)
    if lost := sorted(set(order_ids) - written):
        logger.error(
            "queued checkouts %s are stale and neither their Redis record, their claim nor an order exists: "
            "see docs/operations.md, queued checkouts that are never written",
            lost,
        )
