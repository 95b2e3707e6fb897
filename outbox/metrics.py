"""What the event plumbing counts: the relay's deliveries, the consumers' events."""

from core.metrics import Counter, Gauge

RELAY_PUBLISHED = Counter("shop_relay_published_total", "Outbox events acknowledged by Kafka")
RELAY_FAILURES = Counter("shop_relay_failures_total", "Outbox events not delivered in a batch")
CONSUMER_EVENTS = Counter(
    "shop_consumer_events_total", "Events seen by consumers", ["consumer", "result"]
)  # result: processed | duplicate | ignored | dead_lettered
CONSUMER_WAITING = Gauge(
    "shop_consumer_waiting",
    "1 while a consumer keeps a message because PostgreSQL, Redis or the network is down",
    ["consumer"],
    multiprocess_mode="livemax",
)
