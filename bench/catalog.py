"""The public catalog against /healthz on a gunicorn this bench starts (issue 18; bench/README.md).

    python -m bench.catalog --rounds 3 --duration 5

GET /healthz, GET /api/products (pages, sorts, a search) and GET /api/products/{sku} with the same
client and concurrency: requests/s, p50, p99, gunicorn CPU per request, the ratio to /healthz (goal
>= 0.5) and the SQL statements per request once warm (goal 0; the stock hints are re-read by one
query per process every 5 s, counted here)."""

import argparse
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    p.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker (default 4)")
    p.add_argument("--concurrency", type=int, default=16, help="open connections (default 16)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per endpoint (default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per endpoint first (default 2)")
    p.add_argument("--rounds", type=int, default=1, help="measure each endpoint N times, report the median")
    p.add_argument("--products", type=int, default=1000, help=f"{PREFIX} products (default 1000)")
    p.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is below {GOAL} or a request sent SQL")
    return p.parse_args(argv)


def build_specs(skus: list[str]) -> dict[str, list[h.Spec]]:
    pages = [f"/api/products?page={n}&page_size=20" for n in range(1, 11)]
    browse = [*pages, "/api/products?sort=-price", "/api/products?sort=name&in_stock=true", "/api/products?q=c-0"]
    return {
        HEALTHZ: [h.Spec("GET", "/healthz")],
        "GET /api/products": [h.Spec("GET", path) for path in browse],
        "GET /api/products/{sku}": [h.Spec("GET", f"/api/products/{sku}") for sku in skus[:200]],
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    skus = [f"{PREFIX}{i:04d}" for i in range(1, args.products + 1)]
    h.ensure_products(skus, 1000)
    specs = build_specs(skus)
    redis = get_redis_connection("default")
    load = {"count": None, "duration": args.duration, "concurrency": args.concurrency, "threads": 1}
    results: dict[str, list[tuple[h.Run, int]]] = {name: [] for name in specs}
    h.warn_if_busy()
    with h.Gunicorn(workers=args.workers, threads=args.threads, env=dict(h.PRODUCTION_LIKE_ENV),
                    app="bench.catalog:sql_probe") as server:  # fmt: skip
        print(f"gunicorn {server.base_url}: {args.workers} workers x {args.threads} threads, DEBUG off; "
              f"{args.products:,} {PREFIX} products among the catalog's")  # fmt: skip
        for name, spec_list in specs.items():
            status, body = h.http_call(server.base_url, "GET", spec_list[0].path)
            if status != 200:
                raise SystemExit(f"{name}: expected 200, got {status}: {body[:300]!r}")
            if args.warmup > 0:  # every worker's catalog loaded
                h.run_wrk(server, specs=spec_list, **{**load, "duration": args.warmup})
        for _ in range(args.rounds):
            for name, spec_list in specs.items():
                before = int(redis.get(SQL_KEY) or 0)
                run = h.run_wrk(server, specs=spec_list, **load)
                results[name].append((run, int(redis.get(SQL_KEY) or 0) - before))
                print(f"  {name}: {run.rps:,.0f} req/s ({run.answered:,} in {run.seconds:.1f} s)", file=sys.stderr)
    redis.delete(SQL_KEY)

    summary = {name: sorted(runs, key=lambda x: x[0].rps)[(len(runs) - 1) // 2] for name, runs in results.items()}
    base = summary[HEALTHZ][0]
    rows, ok = [], True
    for name, (r, sql) in summary.items():
        ratio, by_cpu = (r.rps / base.rps, base.cpu_ms / r.cpu_ms) if name != HEALTHZ else (None, None)
        ok &= ratio is None or (ratio >= GOAL and r.bad_status == 0)
        rows.append([name, f"{r.answered:,}", f"{r.rps:,.0f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.cpu_ms:.2f}",
                     f"{r.errors + r.bad_status}", f"{sql} ({sql / max(r.answered, 1):.5f}/req)",
                     *("-" if x is None else f"{x:.2f}" for x in (ratio, by_cpu))])  # fmt: skip
    print(f"\nclient {base.client}, {base.concurrency} connections, {args.duration:g} s per endpoint"
          + (f", median of {args.rounds} rounds" if args.rounds > 1 else ""))  # fmt: skip
    h.print_table(["endpoint", "requests", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "errors", "SQL statements",
                   "/healthz", "by CPU"], rows)  # fmt: skip
    print("SQL statements: sent by the measured requests, all processes; the catalog's only query once warm is the")
    print("stock hints' refresh, one per process at most every 5 s. by CPU: healthz's CPU per request over this one's.")
    print(f"goal catalog/healthz >= {GOAL}: {'met' if ok else 'NOT met'}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
