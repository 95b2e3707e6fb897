"""Cart endpoints against /healthz on a gunicorn of its own (bench/README.md).

python -m bench.cart --rounds 3 --duration 5"""

import sys

from django_redis import get_redis_connection

from bench import harness as h
from cart.storage import cart_key

GOAL = 0.6
SHOPPERS, PRODUCTS, LINES = 200, 50, 5  # shoppers bench-00001..., products BENCH-0001..., lines in each cart


def build_specs(shoppers, skus) -> dict[str, list[h.Spec]]:
    """Each shopper cycles through its own LINES SKUs with changing quantities: every PUT writes, carts keep LINES."""
    auth = [{"Authorization": f"Token {s.token}"} for s in shoppers]
    own = [[skus[(i * LINES + j) % len(skus)] for j in range(LINES)] for i in range(len(shoppers))]
    json_auth = [{**a, "Content-Type": "application/json"} for a in auth]
    put = [
        h.Spec("PUT", f"/api/cart/items/{own[i][r % LINES]}", json_auth[i], b'{"quantity": %d}' % (1 + (r * 7 + i) % 9))
        for r in range(LINES * 2)
        for i in range(len(shoppers))
    ]
    carts = [{sku: 1 + (i + j) % 3 for j, sku in enumerate(own[i])} | h.SHIPS for i in range(len(shoppers))]
    h.fill_carts([(s.user_id, cart) for s, cart in zip(shoppers, carts, strict=True)])
    return {
        "GET /healthz": [h.Spec("GET", "/healthz")],
        "PUT /api/cart/items/{sku}": put,
        "GET /api/cart": [h.Spec("GET", "/api/cart", a) for a in auth],
    }


def main(argv=None) -> int:
    args = h.parse(argv, __doc__, *h.ENDPOINTS, check=(False, f"exit 1 when a ratio is below {GOAL}"))
    h.setup()
    skus = [f"BENCH-{i:04d}" for i in range(1, PRODUCTS + 1)]
    h.ensure_products(skus, 500_000)
    h.ensure_shipping_and_tax(skus)  # each cart ships, and is taxed
    shoppers = h.ensure_shoppers(SHOPPERS, prefix="bench-")
    env = {"RATE_LIMIT_CART_WRITE": "1000000000/min"}  # the throttle's Redis call still runs, but no PUT is a 429
    try:
        summary = h.measure_endpoints(args, build_specs(shoppers, skus), env=env)
    finally:
        get_redis_connection("default").delete(*[cart_key(s.user_id) for s in shoppers])
    return h.print_endpoints(summary, args, "cart/healthz", GOAL)


if __name__ == "__main__":
    sys.exit(main())
