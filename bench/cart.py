"""Cart endpoints against /healthz on a gunicorn of its own: requests/s, p50, p99, CPU per request and the
ratio (goal >= 0.5). Issue 3; bench/README.md.

    python -m bench.cart --rounds 3 --duration 5"""

import json
import shlex
import sys
from pathlib import Path

from django_redis import get_redis_connection

from bench import harness as h
from cart.storage import cart_key

GOAL = 0.5
HEALTHZ = "GET /healthz"
SHOPPERS, PRODUCTS, LINES = 200, 50, 5  # shoppers bench-00001..., products BENCH-0001..., lines in each cart


def parse_args(argv=None):
    p = h.parser(__doc__, "workers", "threads", "concurrency", "duration", "warmup", "rounds", "client_threads",
                 debug=(False, "run the server with DEBUG on (default: off)"),
                 access_log=(False, "gunicorn writes an access log, as in the Procfile"),
                 gunicorn_args=("", 'more gunicorn options, e.g. "--worker-class gthread"'),
                 rate_limit=(False, "keep the cart-write rate limit (default: out of reach)"),
                 check=(False, f"exit 1 when a ratio is below {GOAL}"))  # fmt: skip
    p.add_argument("--requests", type=int, default=None, help="a request count per endpoint instead of a duration")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    return p.parse_args(argv)


def build_specs(shoppers, skus) -> dict[str, list[h.Spec]]:
    """Each shopper cycles through its own LINES SKUs with changing quantities: every PUT writes, carts keep LINES."""
    auth = [{"Authorization": f"Token {s.token}"} for s in shoppers]
    own = [[skus[(i * LINES + j) % len(skus)] for j in range(LINES)] for i in range(len(shoppers))]
    put = [h.Spec("PUT", f"/api/cart/items/{own[i][r % LINES]}", {**auth[i], "Content-Type": "application/json"},
                  json.dumps({"quantity": 1 + (r * 7 + i) % 9}).encode())
           for r in range(LINES * 2) for i in range(len(shoppers))]  # fmt: skip
    h.fill_carts([(s.user_id, {sku: 1 + (i + j) % 3 for j, sku in enumerate(own[i])}) for i, s in enumerate(shoppers)])
    return {HEALTHZ: [h.Spec("GET", "/healthz")], "PUT /api/cart/items/{sku}": put,
            "GET /api/cart": [h.Spec("GET", "/api/cart", a) for a in auth]}  # fmt: skip


def sanity_check(server, specs: dict[str, list[h.Spec]]) -> None:
    """One request per endpoint before the load: a bench of 401s would be meaningless."""
    for name, (spec, *_) in specs.items():
        status, body = h.http_call(server.base_url, spec.method, spec.path, spec.headers, spec.body)
        if status != 200:
            raise SystemExit(f"{name}: expected 200, got {status}: {body[:300]!r}")
        if name != HEALTHZ and (len(json.loads(body)["items"]) != LINES or json.loads(body)["warnings"]):
            raise SystemExit(f"{name}: expected a cart of {LINES} lines, got {body[:300]!r}")


def main(argv=None) -> int:
    args = parse_args(argv)
    h.setup()
    skus = [f"BENCH-{i:04d}" for i in range(1, PRODUCTS + 1)]
    h.ensure_products(skus, 500_000)
    shoppers = h.ensure_shoppers(SHOPPERS, prefix="bench-")
    specs = build_specs(shoppers, skus)
    env = {"DEBUG": "1"} if args.debug else {}
    if not args.rate_limit:  # the throttle's Redis call still runs, but no PUT is a cheap 429
        env["RATE_LIMIT_CART_WRITE"] = "1000000000/min"
    extra = (["--access-logfile", "-"] if args.access_log else []) + shlex.split(args.gunicorn_args)
    try:
        with h.Gunicorn(workers=args.workers, threads=args.threads, env=env, extra_args=extra) as server:
            print(f"gunicorn {args.workers} x {args.threads} threads, --debug {args.debug}, --access-log "
                  f"{args.access_log}, --rate-limit {args.rate_limit}")
            sanity_check(server, specs)
            summary = h.measure_endpoints(server, specs, rounds=args.rounds, warmup=args.warmup, count=args.requests,
                                          duration=args.duration, concurrency=args.concurrency,
                                          threads=args.client_threads)  # fmt: skip
    finally:
        get_redis_connection("default").delete(*[cart_key(s.user_id) for s in shoppers])
    how = f"{args.requests:,} requests" if args.requests else f"{args.duration:g} s"
    ratios = h.print_endpoints(summary, how, args.rounds, "cart/healthz")
    ok = all(ratio >= GOAL for ratio, _ in ratios.values())
    print(f"goal cart/healthz >= {GOAL}: {h.verdict(ok, 'met', 'NOT met')}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": {
            name: {**{k: v for k, v in vars(r).items() if k not in ("records", "probe")}, "rps": r.rps,
                   "cpu_ms_per_request": r.cpu_ms, "ratio": r.rps / summary[HEALTHZ].rps or None}
            for name, r in summary.items()}}, indent=2))  # fmt: skip
    failed = any(r.errors or r.bad_status for r in summary.values())  # see the errors column
    return 1 if failed or (args.check and not ok) else 0


if __name__ == "__main__":
    sys.exit(main())
