"""Catalog endpoints against /healthz on a gunicorn of its own, and their SQL once warm (bench/README.md).

python -m bench.catalog --rounds 3 --duration 5"""

import sys

from django_redis import get_redis_connection

from bench import harness as h

GOAL = 0.6
PREFIX, PRODUCTS = "BENCH-C-", 1000
SQL_KEY = "bench:catalog:sql"


def sql_probe(environ, start_response):
    """config.wsgi; a request that sent SQL adds its count to a Redis counter (a warm one costs nothing more)."""
    with h.counting_sql() as counted:
        response = h.wsgi_application()(environ, start_response)
    if counted[0]:
        get_redis_connection("default").incrby(SQL_KEY, counted[0])
    return response


def build_specs(skus: list[str]) -> dict[str, list[h.Spec]]:
    pages = [f"/api/products?page={n}&page_size=20" for n in range(1, 11)]
    browse = [*pages, "/api/products?sort=-price", "/api/products?sort=name&in_stock=true", "/api/products?q=c-0"]
    return {
        "GET /healthz": [h.Spec("GET", "/healthz")],
        "GET /api/products": [h.Spec("GET", path) for path in browse],
        "GET /api/products/{sku}": [h.Spec("GET", f"/api/products/{sku}") for sku in skus[:200]],
    }


def main(argv=None) -> int:
    check = (False, f"exit 1 when a ratio is below {GOAL} or a request sent SQL")
    args = h.parse(argv, __doc__, *h.ENDPOINTS, check=check)
    h.setup()
    skus = [f"{PREFIX}{i:04d}" for i in range(1, PRODUCTS + 1)]
    h.ensure_products(skus, 1000)
    redis = get_redis_connection("default")
    probe = lambda: int(redis.get(SQL_KEY) or 0)  # noqa: E731
    summary = h.measure_endpoints(args, build_specs(skus), app="bench.catalog:sql_probe", probe=probe)
    redis.delete(SQL_KEY)
    column = {"SQL statements": lambda r: f"{r.probe} ({r.probe / max(r.answered, 1):.5f}/req)"}
    return h.print_endpoints(summary, args, "catalog/healthz", GOAL, column)


if __name__ == "__main__":
    sys.exit(main())
