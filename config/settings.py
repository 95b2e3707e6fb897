"""The shop's one settings module.

Every value comes from the environment with a local default that works on a
developer machine as it is; production differs only by environment values.
"""

import os
import re
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import env, env_bool, env_float, env_int, env_list

BASE_DIR = Path(__file__).resolve().parent.parent

# The test suite runs on config.test_settings, named in pyproject.toml (pytest-django
# puts it in DJANGO_SETTINGS_MODULE, so processes the tests start inherit it): the
# tests' own Redis databases, development secrets, no HTTPS redirect. Nothing else in
# the environment (a test runner's PYTEST_VERSION, say) turns any of that on.
TESTING = os.environ.get("DJANGO_SETTINGS_MODULE") == "config.test_settings"

DEV_SECRET_KEY = "dev-only-insecure-secret-key-change-me"
DEV_PAYMENT_WEBHOOK_SECRET = "dev-only-payment-webhook-secret"
# Every secret that is, or ever was, committed to this repository: refused outside
# development. tests/config/test_settings.py checks the repository against this list.
COMMITTED_SECRETS = frozenset(
    {
        DEV_SECRET_KEY,
        DEV_PAYMENT_WEBHOOK_SECRET,
        "compose-local-secret-key-set-a-real-one",
        "compose-local-webhook-secret-set-a-real-one",
        "bench-only-secret-key-" + "x" * 40,
        "bench-only-webhook-secret",
        "sk_test_shop",  # the tests' Stripe server (tests/stripe_server.py)
        "whsec_test_shop",
    }
)
# Django's own rule for SECRET_KEY (its security.W009), and the webhook's shorter
# minimum, as payment providers hand out 32-character secrets.
MIN_SECRET_KEY_LENGTH = 50
MIN_WEBHOOK_SECRET_LENGTH = 32
MIN_DIFFERENT_CHARACTERS = 5

# Off unless asked for: `make run` sets DEBUG=1. The image, and any process started
# another way, runs as in production and needs real secrets.
DEBUG = env_bool("DEBUG", False)
_DEVELOPMENT = DEBUG or TESTING
SECRET_KEY = env("SECRET_KEY", DEV_SECRET_KEY if _DEVELOPMENT else "")
PAYMENT_WEBHOOK_SECRET = env("PAYMENT_WEBHOOK_SECRET", DEV_PAYMENT_WEBHOOK_SECRET if _DEVELOPMENT else "")
# Which provider takes the money (orders/provider.py): "simulator" (development, the tests)
# or "stripe" (STRIPE_* below; docs/operations.md, "Switching to Stripe").
PAYMENT_PROVIDER = env("PAYMENT_PROVIDER", "simulator")
if PAYMENT_PROVIDER not in ("simulator", "stripe"):
    raise ImproperlyConfigured(f"PAYMENT_PROVIDER must be simulator or stripe, got {PAYMENT_PROVIDER!r}")
# The simulator's API. In development, the simulator `make run` serves in a process of its
# own (Procfile `provider`, port 8001) while DEBUG is on (config/dev_provider.py).
PAYMENT_PROVIDER_URL = env("PAYMENT_PROVIDER_URL", "http://127.0.0.1:8001/dev/payment-provider" if DEBUG else "")
# The simulator's API key: only who holds it opens sessions, captures, voids, refunds.
PAYMENT_PROVIDER_KEY = env("PAYMENT_PROVIDER_KEY", "dev-only-payment-provider-key" if _DEVELOPMENT else "")
# Stripe (PAYMENT_PROVIDER=stripe): the secret API key (sk_test_... or sk_live_...), the
# webhook endpoint's signing secret (whsec_...), and where its API is (a stripe-mock or a
# test server may be named; Stripe's own by default).
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", "")
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", "")
STRIPE_API_BASE = env("STRIPE_API_BASE", "https://api.stripe.com")
# The library retries a call that failed before an answer, a 409 or a 5xx this many times
# (with its idempotency key: one charge however often sent).
STRIPE_MAX_NETWORK_RETRIES = env_int("STRIPE_MAX_NETWORK_RETRIES", 2)
STRIPE_TIMEOUT_SECONDS = env_int("STRIPE_TIMEOUT_SECONDS", 10)
# Where Stripe's hosted page sends the shopper back (the shop's front end).
STRIPE_SUCCESS_URL = env("STRIPE_SUCCESS_URL", "http://127.0.0.1:8000/api/orders?paid=1")
STRIPE_CANCEL_URL = env("STRIPE_CANCEL_URL", "http://127.0.0.1:8000/api/orders?paid=0")
# This shop's name at Stripe: its sessions, PaymentIntents and refunds carry it in their
# metadata (`shop`) and its idempotency keys start with it, so that a Stripe account shared
# with another shop, a staging copy or a payment link is never taken for this shop's.
STRIPE_INSTANCE = env("STRIPE_INSTANCE", "shop")
if PAYMENT_PROVIDER == "stripe" and not (STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET):
    raise ImproperlyConfigured("PAYMENT_PROVIDER=stripe needs STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET.")
# How long a card issuer holds authorized money (Stripe: 7 days for most cards). With
# PAYMENT_CAPTURE_BEFORE_EXPIRY, a paid order not shipped a day before its hold ends is
# captured then (orders/services/authorizations.py): the goods never leave unpaid.
PAYMENT_AUTHORIZATION_DAYS = env_int("PAYMENT_AUTHORIZATION_DAYS", 7)
if PAYMENT_AUTHORIZATION_DAYS < 1:
    raise ImproperlyConfigured(f"PAYMENT_AUTHORIZATION_DAYS must be 1 or more, got {PAYMENT_AUTHORIZATION_DAYS}")
PAYMENT_CAPTURE_BEFORE_EXPIRY = env_bool("PAYMENT_CAPTURE_BEFORE_EXPIRY", True)
# Where the simulator sends its signed confirmations.
DEV_PROVIDER_WEBHOOK_URL = env("DEV_PROVIDER_WEBHOOK_URL", "http://127.0.0.1:8000/api/payments/webhook")
# Drills: the simulator answers every API call 503 ("fail"), or after DEV_PROVIDER_DELAY_SECONDS ("slow").
DEV_PROVIDER_FAILURE = env("DEV_PROVIDER_FAILURE", "")
DEV_PROVIDER_DELAY_SECONDS = env_int("DEV_PROVIDER_DELAY_SECONDS", 3)
# When an authorized payment's money is taken: "on_shipment" (the order ships) or "immediate".
PAYMENT_CAPTURE = env("PAYMENT_CAPTURE", "on_shipment")
if PAYMENT_CAPTURE not in ("on_shipment", "immediate"):
    raise ImproperlyConfigured(f"PAYMENT_CAPTURE must be on_shipment or immediate, got {PAYMENT_CAPTURE!r}")
# How long a payment session (POST /api/orders/{id}/payment) stays open, at most the order's deadline.
PAYMENT_SESSION_SECONDS = env_int("PAYMENT_SESSION_SECONDS", 900)
# How long after shipping a shopper may ask to return units (POST /api/orders/{id}/returns).
RETURN_WINDOW_DAYS = env_int("RETURN_WINDOW_DAYS", 30)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")

# --- HTTPS: on outside development; `manage.py check --deploy` is clean --------
# Behind a proxy that terminates TLS, name the header it sets, e.g.
# SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO (the proxy must overwrite it).
_PROXY_SSL_HEADER = env("SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (_PROXY_SSL_HEADER, "https") if _PROXY_SSL_HEADER else None
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not _DEVELOPMENT)
# Probes and scrapes come over plain HTTP from inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if _DEVELOPMENT else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Joining the browsers' preload list is hard to undo: the operator's choice, not a default.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not _DEVELOPMENT)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not _DEVELOPMENT)
# The admin's origin(s) when served through another host name, e.g. https://shop.example.com
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
CSRF_FAILURE_VIEW = "core.views.csrf_failure"


def strong_enough(secret: str, *, min_length: int) -> bool:
    """The one strength rule of the shop's secrets: `min_length` characters or more,
    MIN_DIFFERENT_CHARACTERS of them different (32 x "a" is long, not secret)."""
    return len(secret) >= min_length and len(set(secret)) >= MIN_DIFFERENT_CHARACTERS


def refuse_development_secrets(*, debug: bool, secret_key: str, webhook_secret: str | None) -> None:
    """Outside development the shop runs only on secrets of its own: set, strong
    enough, and none that was ever committed here (anyone could sign webhooks)."""
    if debug:
        return
    make_one = "e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(64))'"
    for name, value, min_length in (
        ("SECRET_KEY", secret_key, MIN_SECRET_KEY_LENGTH),
        ("PAYMENT_WEBHOOK_SECRET", webhook_secret, MIN_WEBHOOK_SECRET_LENGTH),
    ):
        if value is None:
            continue
        if not value:
            raise ImproperlyConfigured(f"DEBUG is off and {name} is not set: set it in the environment ({make_one}).")
        if value in COMMITTED_SECRETS:
            raise ImproperlyConfigured(
                f"DEBUG is off but {name} is a value committed to this repository (the development "
                f"or an example value): set a secret of your own ({make_one})."
            )
        if not strong_enough(value, min_length=min_length):
            raise ImproperlyConfigured(
                f"DEBUG is off and {name} is too weak: {min_length} or more characters, "
                f"{MIN_DIFFERENT_CHARACTERS} of them different ({make_one})."
            )


refuse_development_secrets(
    debug=_DEVELOPMENT,
    secret_key=SECRET_KEY,
    # With Stripe, the simulator's secret signs nothing: Stripe's webhooks carry its own (whsec_...).
    webhook_secret=PAYMENT_WEBHOOK_SECRET if PAYMENT_PROVIDER == "simulator" else None,
)
if not _DEVELOPMENT and PAYMENT_PROVIDER == "stripe":
    for _name, _value in (("STRIPE_SECRET_KEY", STRIPE_SECRET_KEY), ("STRIPE_WEBHOOK_SECRET", STRIPE_WEBHOOK_SECRET)):
        if _value in COMMITTED_SECRETS:
            raise ImproperlyConfigured(f"DEBUG is off but {_name} is the tests' value committed here: set Stripe's.")

INSTALLED_APPS = [
    "core",
    "config",
    "config.admin.ShopAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_countries",
    "shop",
    "inventory",
    "cart",
    "orders",
    "outbox",
]

MIDDLEWARE = [
    "core.requestid.RequestIdMiddleware",
    "core.views.ServiceErrorMiddleware",
    "core.views.RefuseNulMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    # Before everything else a checkout costs: refusals of a sold-out sale (orders/early_refusal.py).
    "orders.early_refusal.EarlyRefusalMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Content-Security-Policy on every page (the admin's above all): scripts, styles and
# images from this origin only, nothing inline, no framing. The shop's own admin pages
# keep their script and style in config/static/shop/. Swagger UI (development only,
# API_DOCS) starts itself with an inline script, so its page goes without.
CONTENT_SECURITY_POLICY = {
    "EXCLUDE_URL_PREFIXES": ["/api/docs/"],
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- PostgreSQL -------------------------------------------------------------
DATABASE_URL = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/shop")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60), conn_health_checks=True
    )
}


def application_name(argv: list[str], node: str) -> str:
    """What pg_stat_activity shows for this process's connections, e.g.
    "shop relay_outbox node 2": which process of which node holds the relay's
    lock or runs a slow query."""
    program = os.path.basename(argv[0]) if argv else "python"
    if program == "manage.py" and len(argv) > 1:
        program = argv[1]
    elif program == "celery":
        program = next((f"celery {arg}" for arg in argv if arg in ("worker", "beat")), program)
    return f"shop {program}{f' node {node}' if node else ''}"[:63]  # PostgreSQL keeps 63 bytes


# Added to what DATABASE_URL's query string sets (sslmode, options, …).
DATABASES["default"].setdefault("OPTIONS", {}).update(
    {"connect_timeout": 5, "application_name": application_name(sys.argv, env("SHOP_NODE", ""))}
)
DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME", "test_shop")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cart, flash-sale gate, caches ----------------------------------
# Tests use their own database (TEST_REDIS_URL lets two test runs share one Redis).
REDIS_URL = (
    env("TEST_REDIS_URL", "redis://127.0.0.1:6379/15") if TESTING else env("REDIS_URL", "redis://127.0.0.1:6379/0")
)
# Several nodes: Redis behind Sentinel. With REDIS_SENTINELS ("host:port,host:port,...") every
# Redis client (carts, the gate, rate limits, caches, Celery's broker) asks the Sentinels for the
# primary of REDIS_SENTINEL_MASTER, and after a failover dials the new one without a restart; the
# URLs then give only the database number. Reads go to the primary too: a replica may lag.
REDIS_SENTINELS = [
    (host, int(port)) for host, _, port in (item.rpartition(":") for item in env_list("REDIS_SENTINELS", ""))
]
REDIS_SENTINEL_MASTER = env("REDIS_SENTINEL_MASTER", "shop")


REDIS_MAX_CONNECTIONS = env_int("REDIS_MAX_CONNECTIONS", 256)
# Carts, guest carts, rate limits and saved addresses on a Redis Cluster: its nodes as
# host:port (any few; the client learns the rest). Empty: on REDIS_URL (core/sharding.py).
REDIS_CLUSTER_NODES = env_list("REDIS_CLUSTER_NODES", "")
REDIS_CLUSTER_SOCKET_TIMEOUT = env_float("REDIS_CLUSTER_SOCKET_TIMEOUT", 1.0)
# How often beat copies the hot-cache generation into every bucket on a cluster (core/tasks.py).
GENERATION_SYNC_SECONDS = env_int("GENERATION_SYNC_SECONDS", 10)


def redis_cache(
    url: str, *, timeout: float, sentinels: list = REDIS_SENTINELS, master: str = REDIS_SENTINEL_MASTER
) -> dict:
    """A django-redis cache on `url` (through the Sentinels, to `master`, when there are some)."""
    options = {
        "CLIENT_CLASS": "django_redis.client.DefaultClient",
        "SOCKET_CONNECT_TIMEOUT": timeout,
        "SOCKET_TIMEOUT": timeout,
        "CONNECTION_POOL_KWARGS": {"max_connections": REDIS_MAX_CONNECTIONS},
    }
    if sentinels:
        url = f"redis://{master}{urlsplit(url).path or '/0'}"
        options.update(
            CONNECTION_FACTORY="django_redis.pool.SentinelConnectionFactory",
            SENTINELS=sentinels,
            SENTINEL_KWARGS={"socket_timeout": timeout, "socket_connect_timeout": timeout},
        )
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url, "OPTIONS": options}


CACHES = {"default": redis_cache(REDIS_URL, timeout=1)}
# The flash-sale gate may live on its own Redis; by default it shares the cart's. Through
# Sentinel, its own Redis is another master the Sentinels watch (GATE_REDIS_URL's host is not read).
GATE_REDIS_URL = env("GATE_REDIS_URL", REDIS_URL)
GATE_REDIS_SENTINEL_MASTER = env("GATE_REDIS_SENTINEL_MASTER", REDIS_SENTINEL_MASTER)
CACHES["gate"] = redis_cache(GATE_REDIS_URL, timeout=0.5, master=GATE_REDIS_SENTINEL_MASTER)

# --- Celery -----------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14" if TESTING else "redis://127.0.0.1:6379/1")
if REDIS_SENTINELS:
    _broker_db = urlsplit(CELERY_BROKER_URL).path or "/1"
    CELERY_BROKER_URL = ";".join(f"sentinel://{host}:{port}{_broker_db}" for host, port in REDIS_SENTINELS)
    CELERY_BROKER_TRANSPORT_OPTIONS = {"master_name": REDIS_SENTINEL_MASTER}
CELERY_TASK_ALWAYS_EAGER = TESTING
CELERY_TASK_IGNORE_RESULT = True
ORDER_EXPIRY_INTERVAL_SECONDS = env_int("ORDER_EXPIRY_INTERVAL_SECONDS", 30)
ORDER_EXPIRY_BATCH_SIZE = env_int("ORDER_EXPIRY_BATCH_SIZE", 500)
# Every node may run a beat (make cluster does): each job is safe to run twice at
# once (docs/operations.md, "Scaling out"), so no beat has to be the only one.
CELERY_BEAT_SCHEDULE = {
    "expire-unpaid-orders": {
        "task": "orders.tasks.expire_unpaid_orders_task",
        "schedule": ORDER_EXPIRY_INTERVAL_SECONDS,
    },
    # Paid orders not shipped whose card authorization ends within a day: order managers
    # told, and the money captured (PAYMENT_CAPTURE_BEFORE_EXPIRY; orders/services/authorizations.py).
    "capture-ending-authorizations": {
        "task": "orders.tasks.capture_ending_authorizations_task",
        "schedule": float(env_int("AUTHORIZATION_CHECK_INTERVAL_SECONDS", 3600)),
    },
    "publish-outbox": {
        "task": "outbox.tasks.publish_outbox_task",
        "schedule": 1.0,
        "options": {"expires": 5},
    },
    "purge-published-outbox-events": {
        "task": "outbox.tasks.purge_published_events_task",
        "schedule": float(env_int("OUTBOX_PURGE_INTERVAL_SECONDS", 3600)),
    },
    # Queued checkouts still unwritten after QUEUE_STALE_AFTER_SECONDS sent to the writer again
    # from their Redis record, or rejected queue_lost without it (orders/services/queue_sweeper.py).
    "resend-stale-queued-checkouts": {
        "task": "orders.tasks.resend_stale_queued_task",
        "schedule": float(env_int("QUEUE_SWEEP_SECONDS", 30)),
        "options": {"expires": env_int("QUEUE_SWEEP_SECONDS", 30)},
    },
}
if REDIS_CLUSTER_NODES:
    # A bucket's copy of the hot-cache generation lost with a shard (core/sharding.py) is written again.
    CELERY_BEAT_SCHEDULE["sync-cache-generations"] = {
        "task": "core.tasks.sync_generations_task",
        "schedule": float(GENERATION_SYNC_SECONDS),
        "options": {"expires": GENERATION_SYNC_SECONDS},
    }

# --- Kafka ------------------------------------------------------------------
KAFKA_BOOTSTRAP_SERVERS = env("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
KAFKA_ORDERS_TOPIC = env("KAFKA_ORDERS_TOPIC", "shop.orders")
KAFKA_TOPIC_PARTITIONS = env_int("KAFKA_TOPIC_PARTITIONS", 6)
KAFKA_REPLICATION_FACTOR = env_int("KAFKA_REPLICATION_FACTOR", 1)
KAFKA_CONSUMER_GROUP_PREFIX = env("KAFKA_CONSUMER_GROUP_PREFIX", "shop.")
# A consumer's session (outbox consumers, the queue's writer): a first assignment waits about half of it.
KAFKA_SESSION_TIMEOUT_MS = env_int("KAFKA_SESSION_TIMEOUT_MS", 6000)
# librdkafka gives up on a message after this; the relay then recreates its producer.
KAFKA_MESSAGE_TIMEOUT_MS = env_int("KAFKA_MESSAGE_TIMEOUT_MS", 30_000)
# Queue-mode flash sales: admitted checkouts go to this topic, write_queued_orders writes them.
KAFKA_CHECKOUT_TOPIC = env("KAFKA_CHECKOUT_TOPIC", "shop.checkout-requests")
# How long a queue-mode checkout waits for Kafka's acknowledgement before answering 503
# (plus librdkafka's one-second timer scan at most: orders/queue_producer.py).
QUEUE_ADMIT_TIMEOUT_MS = env_int("QUEUE_ADMIT_TIMEOUT_MS", 1_000)
# After a failed send, queue checkouts are refused at once for this long, then one is tried.
QUEUE_BREAKER_OPEN_SECONDS = env_float("QUEUE_BREAKER_OPEN_SECONDS", 2)
# A queued checkout not written after this long is counted as stale (shop_status, metrics, live page).
QUEUE_STALE_AFTER_SECONDS = env_int("QUEUE_STALE_AFTER_SECONDS", 120)
# Once the gate said a sale (or a shopper's limit of a SKU) is sold out, this process refuses its
# checkouts from memory for this long before asking the gate again: units that come back are
# admitted at most this much later; admission still goes through the gate (never an oversell).
SOLD_OUT_MEMORY_MS = env_int("SOLD_OUT_MEMORY_MS", 500)
# Fault drills only: "kill-after-commit" makes the writer kill itself between a batch's
# commit and its clean-up (docs/operations.md, drills). Empty in every real deployment.
QUEUE_WRITER_DRILL = env("QUEUE_WRITER_DRILL", "")
QUEUE_BATCH_SIZE = env_int("QUEUE_BATCH_SIZE", 500)
QUEUE_BATCH_WAIT_MS = env_int("QUEUE_BATCH_WAIT_MS", 20)
# The writer's CPU priority (os.nice increment): a drain yields the CPU to the web tier on a
# shared host, so shoppers' requests are not slowed by it (bench/queue.py parts 2 and 3). 0: as any.
QUEUE_WRITER_NICE = env_int("QUEUE_WRITER_NICE", 10)

# --- Outbox relay and consumers ---------------------------------------------
OUTBOX_BATCH_SIZE = env_int("OUTBOX_BATCH_SIZE", 500)
OUTBOX_FLUSH_TIMEOUT_SECONDS = env_float("OUTBOX_FLUSH_TIMEOUT_SECONDS", 10)
OUTBOX_POLL_INTERVAL_SECONDS = env_float("OUTBOX_POLL_INTERVAL_SECONDS", 0.1)
OUTBOX_MAX_BACKOFF_SECONDS = env_float("OUTBOX_MAX_BACKOFF_SECONDS", 5)
OUTBOX_RETENTION_DAYS = env_int("OUTBOX_RETENTION_DAYS", 7)
CONSUMER_MAX_ATTEMPTS = env_int("CONSUMER_MAX_ATTEMPTS", 5)
# A consumer waiting for PostgreSQL, Redis or the network retries its message at most this far apart.
CONSUMER_MAX_BACKOFF_SECONDS = env_float("CONSUMER_MAX_BACKOFF_SECONDS", 5)

# --- The shop ---------------------------------------------------------------
SHOP_CURRENCY = env("SHOP_CURRENCY", "EUR")
# Catalog and shipping prices include tax (the EU's way: the tax is extracted) or not
# (the US's: added on top); docs/architecture.md, "Totals".
PRICES_INCLUDE_TAX = env_bool("PRICES_INCLUDE_TAX", True)
# Whose tax rates a cart shows before the shopper says where it goes (ISO 3166-1 alpha-2).
SHOP_TAX_COUNTRY = env("SHOP_TAX_COUNTRY", "ES")
if not re.fullmatch(r"[A-Z]{2}", SHOP_TAX_COUNTRY):
    raise ImproperlyConfigured(f"SHOP_TAX_COUNTRY must be an ISO 3166-1 alpha-2 code (ES), got {SHOP_TAX_COUNTRY!r}")
ORDER_PAYMENT_TIMEOUT_SECONDS = env_int("ORDER_PAYMENT_TIMEOUT_SECONDS", 900)
CART_TTL_SECONDS = env_int("CART_TTL_SECONDS", 30 * 24 * 3600)
CART_MAX_LINES = env_int("CART_MAX_LINES", 100)
# A checkout takes the cart as it admits it (no call once the order is written); the
# taken cart is kept this long for a retry under the same Idempotency-Key after an
# answer that never came, and is given back when the checkout writes no order.
TAKEN_CART_TTL_SECONDS = env_int("TAKEN_CART_TTL_SECONDS", 600)
# How long a client or CDN may reuse a catalog answer (its `available` is a hint).
CATALOG_MAX_AGE_SECONDS = env_int("CATALOG_MAX_AGE_SECONDS", 5)
GUEST_CART_TTL_SECONDS = env_int("GUEST_CART_TTL_SECONDS", 7 * 24 * 3600)
# A guest cart written once lives this long; its token's second write gives it GUEST_CART_TTL_SECONDS.
GUEST_CART_NEW_TTL_SECONDS = env_int("GUEST_CART_NEW_TTL_SECONDS", 3600)
CART_MAX_QUANTITY = env_int("CART_MAX_QUANTITY", 99)
# Unpaid orders one shopper may hold at once (each reserves stock for 15 minutes).
MAX_PENDING_ORDERS_PER_CUSTOMER = env_int("MAX_PENDING_ORDERS_PER_CUSTOMER", 3)
# Hoarding: units of one SKU that unpaid orders may hold, per account and per client
# address (all its accounts together); an account younger than NEW_ACCOUNT_SECONDS
# gets NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS to pay (docs/architecture.md, Hoarding).
MAX_UNPAID_UNITS_PER_SKU = env_int("MAX_UNPAID_UNITS_PER_SKU", 10)
MAX_UNPAID_UNITS_PER_ADDRESS = env_int("MAX_UNPAID_UNITS_PER_ADDRESS", 20)
NEW_ACCOUNT_SECONDS = env_int("NEW_ACCOUNT_SECONDS", 3600)
NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS = env_int("NEW_ACCOUNT_PAYMENT_TIMEOUT_SECONDS", 300)
LOW_STOCK_THRESHOLD = env_int("LOW_STOCK_THRESHOLD", 10)
HEALTH_CHECK_TIMEOUT_SECONDS = env_float("HEALTH_CHECK_TIMEOUT_SECONDS", 1.0)
# GET /metrics needs `Authorization: Bearer <METRICS_TOKEN>`; unset, it is open with DEBUG on and 404 without.
METRICS_TOKEN = env("METRICS_TOKEN", "")
# The relay, the consumers and the queue's writer on a host of their own serve their own /metrics
# on this port (core.metrics.serve_own_metrics); 0, the default, serves none.
METRICS_PORT = env_int("METRICS_PORT", 0)

# Proxies in front of the shop that append the client's address to X-Forwarded-For
# (a load balancer, nginx): 0 trusts no such header and keys limits on the peer.
TRUSTED_PROXIES = env_int("TRUSTED_PROXIES", 0)
# Fixed windows per shopper (per client address for auth and the admin login), counted in Redis -> 429.
RATE_LIMITS = {
    "checkout": env("RATE_LIMIT_CHECKOUT", "30/min"),
    "cart_write": env("RATE_LIMIT_CART_WRITE", "300/min"),
    "guest_cart_write": env("RATE_LIMIT_GUEST_CART_WRITE", "300/min"),  # per guest cart token
    "guest_cart_address": env("RATE_LIMIT_GUEST_CART_ADDRESS", "600/min"),  # guest cart writes per client address
    "guest_cart_new": env("RATE_LIMIT_GUEST_CART_NEW", "50/day"),  # guest carts started per client address
    "auth": env("RATE_LIMIT_AUTH", "20/min"),
    "voucher": env("RATE_LIMIT_VOUCHER", "20/hour"),  # voucher codes entered per shopper (or guest cart)
    "voucher_address": env("RATE_LIMIT_VOUCHER_ADDRESS", "60/hour"),  # voucher codes entered per client address
}

# --- Accounts (docs/architecture.md, "Accounts") ---------------------------------
# Where the links in the shop's e-mails point (password reset, e-mail verification):
# the storefront, which passes uid and token on to the API.
SHOP_PUBLIC_URL = env("SHOP_PUBLIC_URL", "http://127.0.0.1:8000")
# A password-reset link dies after this (Django's token generator), or when the password changes.
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT", 3600)
# Checkout refuses (403 email_not_verified) a shopper whose e-mail is not verified.
REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT = env_bool("REQUIRE_VERIFIED_EMAIL_TO_CHECKOUT", False)
RATE_LIMITS |= {
    "password_reset": env("RATE_LIMIT_PASSWORD_RESET", "5/hour"),  # reset e-mails asked for, per e-mail address
    "password_reset_address": env("RATE_LIMIT_PASSWORD_RESET_ADDRESS", "20/hour"),  # per client address
    "verify_email": env("RATE_LIMIT_VERIFY_EMAIL", "5/hour"),  # verification e-mails sent, per account
}

# --- Email (console locally) ------------------------------------------------
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "shop@localhost")

# --- Auth -------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# --- API --------------------------------------------------------------------
# The OpenAPI schema (/api/schema/), Swagger UI (/api/docs/) and DRF's browsable
# API: for developers, so on with DEBUG (and in tests) and off in production
# unless asked for; with them off the API answers JSON only.
API_DOCS = env_bool("API_DOCS", _DEVELOPMENT)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The API speaks JSON only (bounded in size and depth: core/parsers.py); a form is a 415.
    "DEFAULT_PARSER_CLASSES": ["core.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 20,
    "EXCEPTION_HANDLER": "core.exceptions.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        *(["rest_framework.renderers.BrowsableAPIRenderer"] if API_DOCS else []),
    ],
}
# API tokens (django-rest-knox): only a digest is stored; each expires.
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=env_int("API_TOKEN_TTL_HOURS", 30 * 24)),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}
# Live tokens one user may hold (one per login); the oldest go beyond this.
API_TOKENS_PER_USER = env_int("API_TOKENS_PER_USER", 10)
SPECTACULAR_SETTINGS = {
    "TITLE": "The shop API",
    "DESCRIPTION": "Cart and order flow: Redis cart, idempotent checkout, payments.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Served by WhiteNoise straight from the apps in every mode: no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# JSON lines with the request id (LOG_FORMAT=plain for a terminal).
LOG_FORMAT = env("LOG_FORMAT", "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "core.requestid.RequestIdFilter"},
        "client_mistake": {"()": "config.logs.ClientMistakeFilter"},
    },
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain" if LOG_FORMAT == "plain" else "json",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    "loggers": {
        # The request id middleware logs one line per request; Django's own would repeat it.
        "django.request": {"level": "ERROR"},
        "django.server": {"level": "ERROR"},
        # A foreign Host header is answered 400: a WARNING line, not an ERROR with a traceback.
        "django.security.DisallowedHost": {"filters": ["client_mistake"]},
        # Stripe's library logs two INFO lines per API call; its failures reach us as exceptions.
        "stripe": {"level": "WARNING"},
    },
}
