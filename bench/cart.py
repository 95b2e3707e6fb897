"""Cart throughput against /healthz on a gunicorn this bench starts (issue 3; bench/README.md).

    python -m bench.cart --rounds 3 --duration 5

GET /healthz, PUT /api/cart/items/{sku} and GET /api/cart with the same client and concurrency:
requests/s, p50, p99, gunicorn CPU per request and the cart/healthz ratio (goal >= 0.5)."""

import argparse
import json
import shlex
import sys
from pathlib import Path

from django_redis import get_redis_connection

from bench import harness as h

GOAL = 0.5
HEALTHZ = "GET /healthz"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    p.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker (default 4)")
    p.add_argument("--concurrency", type=int, default=16, help="open connections / requests in flight (default 16)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per endpoint (default 10)")
    p.add_argument("--requests", type=int, default=None, help="a request count per endpoint instead of a duration")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds per endpoint first (default 2)")
    p.add_argument("--rounds", type=int, default=1, help="measure each endpoint N times, report the median")
    p.add_argument("--client-threads", type=int, default=1, help="wrk threads (default 1: the machine has 2 cores)")
    p.add_argument("--shoppers", type=int, default=200, help="distinct shoppers/tokens (default 200)")
    p.add_argument("--products", type=int, default=50, help="BENCH- products (default 50)")
    p.add_argument("--lines", type=int, default=5, help="lines in each cart (default 5)")
    p.add_argument("--debug", action="store_true", help="run the server with DEBUG on (default: off, production-like)")
    p.add_argument("--access-log", action="store_true", help="gunicorn writes an access log, as in the Procfile")
    p.add_argument("--gunicorn-args", default="", help='more gunicorn options, e.g. "--worker-class gthread"')
    p.add_argument("--rate-limit", action="store_true", help="keep the cart-write rate limit (default: out of reach)")
    p.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is below {GOAL}")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    if args.lines > args.products:
        p.error("--lines cannot exceed --products")
    return args


def build_specs(shoppers, skus, lines) -> dict[str, list[h.Spec]]:
    """Round-robin over the shoppers; each cycles through its own `lines` SKUs with changing
    quantities, so carts keep `lines` lines and every PUT really writes."""
    auth = [{"Authorization": f"Token {s.token}"} for s in shoppers]
    own = [[skus[(i * lines + j) % len(skus)] for j in range(lines)] for i in range(len(shoppers))]
    put = [h.Spec("PUT", f"/api/cart/items/{own[i][r % lines]}", {**auth[i], "Content-Type": "application/json"},
                  json.dumps({"quantity": 1 + (r * 7 + i) % 9}).encode())
           for r in range(lines * 2) for i in range(len(shoppers))]  # fmt: skip
    h.fill_carts([(s.user_id, {sku: 1 + (i + j) % 3 for j, sku in enumerate(own[i])}) for i, s in enumerate(shoppers)])
    return {HEALTHZ: [h.Spec("GET", "/healthz")], "PUT /api/cart/items/{sku}": put,
            "GET /api/cart": [h.Spec("GET", "/api/cart", a) for a in auth]}  # fmt: skip


def sanity_check(server, specs: dict[str, list[h.Spec]], lines: int) -> None:
    """One request per endpoint before the load: a bench of 401s would be meaningless."""
    for name, (spec, *_) in specs.items():
        status, body = h.http_call(server.base_url, spec.method, spec.path, spec.headers, spec.body)
        if status != 200:
            raise SystemExit(f"{name}: expected 200, got {status}: {body[:300]!r}")
        if name != HEALTHZ and (len(json.loads(body)["items"]) != lines or json.loads(body)["warnings"]):
            raise SystemExit(f"{name}: expected a cart of {lines} lines, got {body[:300]!r}")


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    from cart.storage import cart_key

    skus = [f"BENCH-{i:04d}" for i in range(1, args.products + 1)]
    h.ensure_products(skus, 500_000)
    shoppers = h.ensure_shoppers(args.shoppers, prefix="bench-")
    specs = build_specs(shoppers, skus, args.lines)
    env = dict(h.DEVELOPMENT_ENV if args.debug else h.PRODUCTION_LIKE_ENV)
    if not args.rate_limit:  # the throttle's Redis call still runs, but no PUT is a cheap 429
        env["RATE_LIMIT_CART_WRITE"] = "1000000000/min"
    extra = (["--access-logfile", "-"] if args.access_log else []) + shlex.split(args.gunicorn_args)
    load = {"count": args.requests, "duration": args.duration, "concurrency": args.concurrency,
            "threads": args.client_threads}  # fmt: skip
    results: dict[str, list[h.Run]] = {name: [] for name in specs}
    h.warn_if_busy()
    generation_before = h.cache_generation()
    try:
        with h.Gunicorn(workers=args.workers, threads=args.threads, env=env, extra_args=extra) as server:
            print(f"gunicorn config.wsgi on {server.base_url}: {args.workers} workers x {args.threads} threads, "
                  f"DEBUG {'on' if args.debug else 'off'}, access log {'on' if args.access_log else 'off'}, "
                  f"cart-write rate limit {'as configured' if args.rate_limit else 'out of reach'}; "
                  f"{args.shoppers} shoppers, carts of {args.lines} lines over {args.products} products")  # fmt: skip
            sanity_check(server, specs, args.lines)
            if args.warmup > 0:  # fills every worker's token/product caches and connection pools
                for spec_list in specs.values():
                    h.run_wrk(server, specs=spec_list, **{**load, "count": None, "duration": args.warmup})
            for _ in range(args.rounds):
                for name, spec_list in specs.items():
                    results[name].append(r := h.run_wrk(server, specs=spec_list, **load))
                    print(f"  {name}: {r.rps:,.0f} req/s ({r.answered} in {r.seconds:.1f} s)", file=sys.stderr)
    finally:
        get_redis_connection("default").delete(*[cart_key(s.user_id) for s in shoppers])
    if moved := h.cache_generation() - generation_before:
        print(f"warning: the hot-cache generation moved {moved} time(s) during the run (another process changed"
              " products, tokens or users): the cart requests after each move were served from PostgreSQL",
              file=sys.stderr)  # fmt: skip

    summary = {name: sorted(runs, key=lambda r: r.rps)[(len(runs) - 1) // 2] for name, runs in results.items()}
    base = summary[HEALTHZ]
    ratios = {name: (r.rps / base.rps if base.rps else 0.0, base.cpu_ms / r.cpu_ms if r.cpu_ms else None)
              for name, r in summary.items() if name != HEALTHZ}  # fmt: skip
    rows = [[name, f"{r.answered:,}", f"{r.rps:,.0f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.cpu_ms:.2f}",
             f"{r.errors + r.bad_status}", *("-" if x is None else f"{x:.2f}" for x in ratios.get(name, (None,) * 2))]
            for name, r in summary.items()]  # fmt: skip
    how = f"{args.requests:,} requests" if args.requests else f"{args.duration:g} s"
    print(f"\nclient {base.client}, {base.concurrency} connections, {how} per endpoint"
          + (f", median of {args.rounds} rounds" if args.rounds > 1 else ""))  # fmt: skip
    h.print_table(["endpoint", "requests", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "errors", "cart/healthz",
                   "by CPU"], rows)  # fmt: skip
    print("CPU ms/req: gunicorn's CPU time (all processes) per request; by CPU: healthz's CPU per request over"
          " the cart's, the ratio a CPU-bound server would show, less disturbed by other load on the machine.")
    ok = all(ratio >= GOAL for ratio, _ in ratios.values())
    print(f"goal cart/healthz >= {GOAL}: {'met' if ok else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": {
            name: {**{k: v for k, v in vars(r).items() if k != "records"}, "rps": r.rps, "cpu_ms_per_request": r.cpu_ms,
                   "ratio": r.rps / base.rps if base.rps else None} for name, r in summary.items()}}, indent=2))
    if failed := any(r.errors or r.bad_status for r in summary.values()):
        print("some requests failed: see the errors column", file=sys.stderr)
    return 1 if failed or (args.check and not ok) else 0


if __name__ == "__main__":
    sys.exit(main())
