"""The public catalog against /healthz on a gunicorn this bench starts (issue 18; bench/README.md).

    python -m bench.catalog --rounds 3 --duration 5

GET /healthz, GET /api/products (pages, sorts, a search) and GET /api/products/{sku} with the same
client and concurrency: requests/s, p50, p99, gunicorn CPU per request, the ratio to /healthz (goal
>= 0.5) and the SQL statements per request once warm (goal 0; the stock hints are re-read by one
query per process every 5 s, counted here)."""

import importlib
import sys

from django.db import connection
from django_redis import get_redis_connection

from bench import harness as h

GOAL = 0.5
HEALTHZ = "GET /healthz"
PREFIX = "BENCH-C-"
SQL_KEY = "bench:catalog:sql"
_application = None


def sql_probe(environ, start_response):
    """config.wsgi's application; a request that sent SQL adds its statements to a Redis counter
    (a warm request sends none, so costs nothing more). Served as bench.catalog:sql_probe."""
    global _application
    if _application is None:
        _application = importlib.import_module("config.wsgi").application
    counted = [0]

    def count(execute, sql, params, many, context):
        counted[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = _application(environ, start_response)
    if counted[0]:
        get_redis_connection("default").incrby(SQL_KEY, counted[0])
    return response


def parse_args(argv=None):
    p = h.parser(__doc__, "workers", "threads", "concurrency", "duration", "warmup", "rounds",
                 products=(1000, f"{PREFIX} products"),
                 check=(False, f"exit 1 when a ratio is below {GOAL} or a request sent SQL"))  # fmt: skip
    return p.parse_args(argv)


def build_specs(skus: list[str]) -> dict[str, list[h.Spec]]:
    pages = [f"/api/products?page={n}&page_size=20" for n in range(1, 11)]
    browse = [*pages, "/api/products?sort=-price", "/api/products?sort=name&in_stock=true", "/api/products?q=c-0"]
    return {HEALTHZ: [h.Spec("GET", "/healthz")], "GET /api/products": [h.Spec("GET", path) for path in browse],
            "GET /api/products/{sku}": [h.Spec("GET", f"/api/products/{sku}") for sku in skus[:200]]}  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    skus = [f"{PREFIX}{i:04d}" for i in range(1, args.products + 1)]
    h.ensure_products(skus, 1000)
    specs = build_specs(skus)
    redis = get_redis_connection("default")
    h.warn_if_busy()
    with h.Gunicorn(workers=args.workers, threads=args.threads, env=dict(h.PRODUCTION_LIKE_ENV),
                    app="bench.catalog:sql_probe") as server:  # fmt: skip
        print(f"gunicorn {server.base_url}: {args.workers} workers x {args.threads} threads, DEBUG off; "
              f"{args.products:,} {PREFIX} products among the catalog's")  # fmt: skip
        for name, spec_list in specs.items():
            status, body = h.http_call(server.base_url, "GET", spec_list[0].path)
            if status != 200:
                raise SystemExit(f"{name}: expected 200, got {status}: {body[:300]!r}")
        summary = h.measure_endpoints(server, specs, rounds=args.rounds, warmup=args.warmup, duration=args.duration,
                                      concurrency=args.concurrency,
                                      probe=lambda: int(redis.get(SQL_KEY) or 0))  # fmt: skip
    redis.delete(SQL_KEY)
    column = {"SQL statements": lambda r: f"{r.probe} ({r.probe / max(r.answered, 1):.5f}/req)"}
    ratios = h.print_endpoints(summary, f"{args.duration:g} s", args.rounds, "/healthz", column)
    ok = all(ratio >= GOAL and summary[name].bad_status == 0 for name, (ratio, _) in ratios.items())
    print("SQL statements: sent by the measured requests, all processes; the catalog's only query once warm is the")
    print("stock hints' refresh, one per process at most every 5 s. by CPU: healthz's CPU per request over this one's.")
    print(f"goal catalog/healthz >= {GOAL}: {h.verdict(ok, 'met', 'NOT met')}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
