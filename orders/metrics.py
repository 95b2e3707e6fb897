"""What orders count: checkouts, payments, refunds, expiries."""

from core.metrics import Counter

ORDERS_CREATED = Counter("shop_orders_created_total", "Orders created by checkout")
CHECKOUT_REFUSALS = Counter("shop_checkout_refusals_total", "Checkouts turned away", ["reason"])
IDEMPOTENT_REPLAYS = Counter("shop_idempotent_replays_total", "Checkouts answered with an existing order")
PAYMENTS = Counter("shop_payments_total", "Payment webhooks applied", ["outcome"])
REFUNDS_REQUESTED = Counter("shop_refunds_requested_total", "Refunds requested", ["reason"])
ORDERS_EXPIRED = Counter("shop_orders_expired_total", "Unpaid orders cancelled at their deadline")
