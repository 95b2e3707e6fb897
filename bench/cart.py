"""Cart throughput against /healthz, on a gunicorn this script starts (issue 3, "What it must show").

    .venv/bin/python bench/cart.py                 # ~10 s per endpoint, 2 workers x 4 threads
    .venv/bin/python bench/cart.py --duration 5 --concurrency 32 --workers 2 --threads 8

Measures, with the same client and concurrency, GET /healthz, PUT /api/cart/items/{sku} and
GET /api/cart (carts of --lines lines), and prints requests/s, p50 and p99 and the cart/healthz
ratio. Goal: ratio >= 0.5. Uses the development database and Redis: it creates (once) products
BENCH-0001... and shoppers bench-00001... with tokens, and fills and afterwards deletes their carts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as h  # noqa: E402 - the repository root must be importable first

GOAL = 0.5


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    p.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker (default 4)")
    p.add_argument("--concurrency", type=int, default=16, help="open connections / requests in flight (default 16)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per endpoint (default 10)")
    p.add_argument("--requests", type=int, default=None, help="a request count per endpoint instead of a duration")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per endpoint first (default 2)")
    p.add_argument("--rounds", type=int, default=1, help="measure each endpoint N times, report the median")
    p.add_argument("--client", choices=["auto", "wrk", "python"], default="auto", help="load generator")
    p.add_argument("--client-threads", type=int, default=1, help="wrk threads (default 1: the machine has 2 cores)")
    p.add_argument("--shoppers", type=int, default=200, help="distinct shoppers/tokens (default 200)")
    p.add_argument("--products", type=int, default=50, help="BENCH- products (default 50)")
    p.add_argument("--lines", type=int, default=5, help="lines in each cart (default 5)")
    p.add_argument("--debug", action="store_true", help="run the server with DEBUG on (default: off, production-like)")
    p.add_argument("--access-log", action="store_true", help="gunicorn writes an access log, as in the Procfile")
    p.add_argument("--gunicorn-args", default="", help='more gunicorn options, e.g. "--worker-class gthread"')
    p.add_argument(
        "--rate-limit", action="store_true", help="keep the cart-write rate limit (default: raised out of reach)"
    )
    p.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is below {GOAL}")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    if args.lines > args.products:
        p.error("--lines cannot exceed --products")
    return args


def cart_skus(index: int, skus: list[str], lines: int) -> list[str]:
    """The SKUs of shopper number `index`: `lines` consecutive ones, different per shopper."""
    return [skus[(index * lines + j) % len(skus)] for j in range(lines)]


def fill_carts(shoppers, skus, lines) -> None:
    """Every bench shopper's cart holds exactly `lines` lines before the run."""
    from django.conf import settings
    from django_redis import get_redis_connection

    from cart.storage import cart_key

    pipe = get_redis_connection("default").pipeline(transaction=False)
    for i, shopper in enumerate(shoppers):
        key = cart_key(shopper.user_id)
        pipe.delete(key)
        pipe.hset(key, mapping={sku: 1 + (i + j) % 3 for j, sku in enumerate(cart_skus(i, skus, lines))})
        pipe.expire(key, settings.CART_TTL_SECONDS)
    pipe.execute()


def cache_generation() -> int:
    from django_redis import get_redis_connection

    from config.hotcache import GENERATION_KEY

    return int(get_redis_connection("default").get(GENERATION_KEY) or 0)


def delete_carts(shoppers) -> None:
    from django_redis import get_redis_connection

    from cart.storage import cart_key

    get_redis_connection("default").delete(*[cart_key(s.user_id) for s in shoppers])


def build_specs(shoppers, skus, lines) -> dict[str, list[h.Spec]]:
    auth = [{"Authorization": f"Token {s.token}"} for s in shoppers]
    put = []
    # Round-robin over shoppers; each shopper cycles through its own lines with changing
    # quantities, so carts keep `lines` lines and every PUT really writes.
    for r in range(lines * 2):
        for i, _ in enumerate(shoppers):
            sku = cart_skus(i, skus, lines)[r % lines]
            body = json.dumps({"quantity": 1 + (r * 7 + i) % 9}).encode()
            put.append(h.Spec("PUT", f"/api/cart/items/{sku}", {**auth[i], "Content-Type": "application/json"}, body))
    return {
        "GET /healthz": [h.Spec("GET", "/healthz")],
        "PUT /api/cart/items/{sku}": put,
        "GET /api/cart": [h.Spec("GET", "/api/cart", auth[i]) for i in range(len(shoppers))],
    }


def sanity_check(base_url: str, specs: dict[str, list[h.Spec]], lines: int) -> None:
    """One request per endpoint before the load: a bench of 401s would be meaningless."""
    for name, spec_list in specs.items():
        status, body = h.http_call(base_url, spec_list[0])
        if status != 200:
            raise SystemExit(f"{name}: expected 200, got {status}: {body[:300]!r}")
        if name != "GET /healthz":
            cart = json.loads(body)
            if len(cart["items"]) != lines or cart["warnings"]:
                raise SystemExit(f"{name}: expected a cart of {lines} lines, got {body[:300]!r}")


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup_django()

    skus = h.ensure_products(args.products)
    shoppers = h.ensure_shoppers(args.shoppers)
    fill_carts(shoppers, skus, args.lines)
    specs = build_specs(shoppers, skus, args.lines)

    env = dict(h.DEVELOPMENT_ENV if args.debug else h.PRODUCTION_LIKE_ENV)
    if not args.rate_limit:
        # Bench shoppers each send several PUTs a second: the throttle still runs (its Redis call is
        # part of the cost), but with a limit no bench shopper reaches, so no request is a cheap 429.
        env["RATE_LIMIT_CART_WRITE"] = "1000000000/min"
    extra = (["--access-logfile", "-"] if args.access_log else []) + shlex.split(args.gunicorn_args)
    client = "wrk" if args.client == "auto" and h.wrk_available() else args.client
    if client == "auto":
        client = "python"
        print("wrk not found (apt-get install -y wrk): falling back to the Python client", file=sys.stderr)

    load = {
        "concurrency": args.concurrency,
        "duration": args.duration,
        "requests": args.requests,
        "client": client,
        "client_threads": args.client_threads,
    }
    results: dict[str, list[h.LoadResult]] = {name: [] for name in specs}
    h.warn_if_busy()
    generation_before = cache_generation()
    try:
        with h.Gunicorn(workers=args.workers, threads=args.threads, env=env, extra_args=extra) as server:
            print(
                f"gunicorn config.wsgi on {server.base_url}: {args.workers} workers x {args.threads} threads, "
                f"DEBUG {'on' if args.debug else 'off'}, access log {'on' if args.access_log else 'off'}, "
                f"cart-write rate limit {'as configured' if args.rate_limit else 'out of reach'}; "
                f"{args.shoppers} shoppers, carts of {args.lines} lines over {args.products} products"
            )
            sanity_check(server.base_url, specs, args.lines)
            if args.warmup > 0:  # fills every worker's token/product caches and connection pools
                for name, spec_list in specs.items():
                    h.run_load(name, server, spec_list, **{**load, "duration": args.warmup, "requests": None})
            for _ in range(args.rounds):
                for name, spec_list in specs.items():
                    result = h.run_load(name, server, spec_list, **load)
                    results[name].append(result)
                    print(
                        f"  {name}: {result.rps:,.0f} req/s ({result.requests} in {result.seconds:.1f} s)",
                        file=sys.stderr,
                    )
    finally:
        delete_carts(shoppers)
    moved = cache_generation() - generation_before
    if moved:
        print(
            f"warning: the hot-cache generation moved {moved} time(s) during the run (another process changed"
            " products, tokens or users): the cart requests after each move were served from PostgreSQL",
            file=sys.stderr,
        )

    summary = {name: _median(runs) for name, runs in results.items()}
    base = summary["GET /healthz"].rps
    base_cpu = summary["GET /healthz"].cpu_ms_per_request
    rows, ratios = [], {}
    for name, r in summary.items():
        ratio = r.rps / base if base else 0.0
        cpu_ratio = base_cpu / r.cpu_ms_per_request if base_cpu and r.cpu_ms_per_request else None
        if name != "GET /healthz":
            ratios[name] = ratio
        rows.append(
            [
                name,
                f"{r.requests:,}",
                f"{r.rps:,.0f}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                "-" if r.cpu_ms_per_request is None else f"{r.cpu_ms_per_request:.2f}",
                f"{r.errors + r.bad_status}",
                "-" if name == "GET /healthz" else f"{ratio:.2f}",
                "-" if name == "GET /healthz" or cpu_ratio is None else f"{cpu_ratio:.2f}",
            ]
        )
    first = next(iter(summary.values()))
    how = f"{args.requests:,} requests" if args.requests else f"{args.duration:g} s"
    print()
    print(
        f"client {first.client}, {first.concurrency} connections, {how} per endpoint"
        + (f", median of {args.rounds} rounds" if args.rounds > 1 else "")
    )
    h.print_table(
        ["endpoint", "requests", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "errors", "cart/healthz", "by CPU"], rows
    )
    print(
        "CPU ms/req: gunicorn's CPU time (all processes) per request; by CPU: healthz's CPU per request over"
        " the cart's, the ratio a CPU-bound server would show, less disturbed by other load on the machine."
    )
    ok = all(ratio >= GOAL for ratio in ratios.values())
    print(f"goal cart/healthz >= {GOAL}: {'met' if ok else 'NOT met'}")

    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "results": {
                        name: {
                            **vars(r),
                            "rps": r.rps,
                            "cpu_ms_per_request": r.cpu_ms_per_request,
                            "ratio": r.rps / base if base else None,
                        }
                        for name, r in summary.items()
                    },
                },
                indent=2,
            )
        )
    failed = any(r.errors or r.bad_status for r in summary.values())
    if failed:
        print("some requests failed: see the errors column", file=sys.stderr)
    return 1 if failed or (args.check and not ok) else 0


def _median(runs: list[h.LoadResult]) -> h.LoadResult:
    return sorted(runs, key=lambda r: r.rps)[(len(runs) - 1) // 2] if len(runs) > 1 else runs[0]


if __name__ == "__main__":
    sys.exit(main())
