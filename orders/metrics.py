"""What orders count: checkouts, payments, refunds, expiries."""

from core.metrics import Counter, Histogram

ORDERS_CREATED = Counter("shop_orders_created_total", "Orders created by checkout")
CHECKOUT_REFUSALS = Counter("shop_checkout_refusals_total", "Checkouts turned away", ["reason"])
IDEMPOTENT_REPLAYS = Counter("shop_idempotent_replays_total", "Checkouts answered with an existing order")
PAYMENTS = Counter("shop_payments_total", "Payment webhooks applied", ["outcome"])
REFUNDS_REQUESTED = Counter("shop_refunds_requested_total", "Refunds requested", ["reason"])
ORDERS_EXPIRED = Counter("shop_orders_expired_total", "Unpaid orders cancelled at their deadline")
QUEUE_BATCH_SIZE = Histogram(
    "shop_queue_batch_size", "Queued checkouts per batch written", buckets=(1, 10, 50, 100, 250, 500, 1000, 2500)
)
QUEUE_BATCH_SECONDS = Histogram(
    "shop_queue_batch_seconds",
    "Time to write one batch of queued checkouts",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
QUEUE_ORDERS_WRITTEN = Counter("shop_queue_orders_written_total", "Queued checkouts written as orders")
QUEUE_ORDERS_REJECTED = Counter("shop_queue_orders_rejected_total", "Queued checkouts the database could not take")
QUEUE_ADMITTED = Counter("shop_queue_admitted_total", "Checkouts handed to the queue (answered 202)")
REFUNDS_FINISHED = Counter("shop_refunds_finished_total", "Refund confirmations from the provider", ["outcome"])
QUEUE_UNAVAILABLE = Counter(
    "shop_queue_unavailable_total", "Queue checkouts refused with 503 (breaker_open: refused at once)", ["reason"]
)
