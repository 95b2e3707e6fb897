"""Shared pieces of the benchmarks in bench/.

- `setup_django()`: import path and settings for a script run as `.venv/bin/python bench/NAME.py`
  from the repository root (it uses the development database and Redis, never the test ones).
- `Gunicorn`: the real server (`.venv/bin/gunicorn config.wsgi`) on a free 127.0.0.1 port, as a
  subprocess that is stopped when the bench exits, however it exits.
- `ensure_shoppers()` / `ensure_products()`: bench data, created in bulk and idempotently.
- `Spec` + `run_load()`: a closed-loop load generator (wrk when installed, else a threaded
  http.client fallback), bounded by a request count or a duration, that reports requests/s and
  latency percentiles. Only ever aimed at 127.0.0.1.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import itertools
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
HOST = "127.0.0.1"
BENCH_PASSWORD = "bench-password-not-secret"  # bench shoppers on the development database only


# --- Django -------------------------------------------------------------------------------------


def setup_django(*, production_like: bool = False) -> None:
    """Make `import cart` mean the app, not bench/cart.py, and set Django up on config.settings.
    `production_like`: DEBUG off (no query logging) with secrets made for this run, in this process
    only (PRODUCTION_LIKE_ENV, below); otherwise DEBUG on. Values already in the environment win."""
    for key, value in (PRODUCTION_LIKE_ENV if production_like else DEVELOPMENT_ENV).items():
        os.environ.setdefault(key, value)
    bench = str(BENCH_DIR)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != bench]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.pop("PYTEST_VERSION", None)  # settings.TESTING would select the test Redis databases
    import django

    django.setup()


# --- Gunicorn -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# Environment for a production-like server: DEBUG off needs secrets of its own,
# made afresh for each bench run (a committed one would be refused), and plain HTTP.
PRODUCTION_LIKE_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "PAYMENT_WEBHOOK_SECRET": secrets.token_urlsafe(40),
    "SECURE_SSL_REDIRECT": "0",
    "LOG_LEVEL": "WARNING",
    # Bench shoppers each hold many unpaid orders: the anti-hoarding limit would refuse them.
    "MAX_PENDING_ORDERS_PER_CUSTOMER": "1000000000",
}
DEVELOPMENT_ENV = {"DEBUG": "1", "MAX_PENDING_ORDERS_PER_CUSTOMER": "1000000000"}


class Gunicorn:
    """`.venv/bin/gunicorn config.wsgi` on a free port; `with Gunicorn(...) as server:`.

    It is stopped (SIGTERM, then SIGKILL after `stop_timeout`) on leaving the block, at
    interpreter exit, on SIGTERM/SIGHUP of the bench, and by the kernel if the bench is killed
    (PR_SET_PDEATHSIG on the master; gunicorn workers exit when their master goes away)."""

    def __init__(
        self,
        *,
        workers: int = 2,
        threads: int = 4,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
        boot_timeout: float = 60.0,
        stop_timeout: float = 15.0,
    ) -> None:
        self.workers, self.threads = workers, threads
        self.env = {**os.environ, **(env or {})}
        self.env.pop("PYTEST_VERSION", None)
        self.extra_args = list(extra_args)
        self.boot_timeout, self.stop_timeout = boot_timeout, stop_timeout
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="bench-gunicorn-", suffix=".txt", delete=False)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        return [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "config.wsgi",
            "--bind", f"{HOST}:{self.port}",
            "--workers", str(self.workers),
            "--threads", str(self.threads),
            "--graceful-timeout", "10",
            "--no-control-socket",  # the default socket (~/.gunicorn/gunicorn.ctl) may be a dev server's
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> Gunicorn:
        self.proc = subprocess.Popen(
            self.command(),
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # the bench has started no threads yet
        )
        atexit.register(self.stop)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError):  # not in the main thread
                signal.signal(signum, _exit_on_signal)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.boot_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop(keep_log=True)
                raise RuntimeError(f"gunicorn exited (log: {self.log.name}):\n{self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
                try:
                    conn.request("GET", "/healthz")
                    response = conn.getresponse()
                    if response.status == 200:
                        return
                    last = f"{response.status} {response.read(300)!r}"
                finally:
                    conn.close()
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop(keep_log=True)
        raise RuntimeError(
            f"gunicorn did not answer /healthz with 200 within {self.boot_timeout:.0f} s (last: {last}; "
            f"log: {self.log.name}):\n{tail}"
        )

    def worker_pids(self) -> list[int]:
        if self.proc is None:
            return []
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            return [int(pid) for pid in children]
        return []

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by the master and its live workers. Per request,
        it is a cost figure that other load on the machine disturbs far less than requests/s."""
        pids = ([self.proc.pid] if self.proc else []) + self.worker_pids()
        return sum(process_cpu_seconds(pid) for pid in pids)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, keep_log: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # graceful: workers finish their requests
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError):
            self.log.close()
            if not keep_log and proc is not None and proc.returncode in (0, -signal.SIGTERM):
                os.unlink(self.log.name)

    def __enter__(self) -> Gunicorn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def process_cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)  # runs atexit handlers, so the server is stopped


# --- Bench data ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shopper:
    user_id: int
    username: str
    token: str


def ensure_shoppers(count: int, *, prefix: str = "bench-") -> list[Shopper]:
    """`count` shoppers named {prefix}00001... with fresh API tokens, created in bulk.

    One password hash for all of them (make_password once), users by bulk_create. The
    database keeps only a token's digest, so each run issues new tokens (a day long) in one
    bulk_create, after deleting the shoppers' old ones, and writes them through to Redis,
    as the token API does when it issues one."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone
    from knox.crypto import hash_token
    from knox.models import AuthToken

    from config.authentication import remember_tokens

    user_model = get_user_model()
    names = [f"{prefix}{i:05d}" for i in range(1, count + 1)]
    ensure_user_ids(count, prefix=prefix, password=BENCH_PASSWORD)
    with transaction.atomic():
        users = dict(user_model.objects.filter(username__in=names).values_list("username", "id"))
        # No signals: these tokens are in no process's cache (a bench starts its own servers).
        AuthToken.objects.filter(user_id__in=users.values())._raw_delete(AuthToken.objects.db)
        tokens = {uid: secrets.token_hex(32) for uid in users.values()}
        expiry = timezone.now() + timedelta(days=1)
        AuthToken.objects.bulk_create(
            [AuthToken(digest=hash_token(t), token_key=t[:15], user_id=u, expiry=expiry) for u, t in tokens.items()],
            batch_size=1000,
        )
        # bulk_create sends no signals: write the tokens through to Redis as issuing them would.
        remember_tokens(AuthToken.objects.filter(user_id__in=users.values()).select_related("user"))
        inactive = user_model.objects.filter(username__in=names, is_active=False)
        if inactive.exists():
            for user in inactive:  # save(): signals bump the hot-cache generation
                user.is_active = True
                user.save(update_fields=["is_active"])
    return [Shopper(users[name], name, tokens[users[name]]) for name in names]


def ensure_products(count: int, *, prefix: str = "BENCH-", price: int = 1000, stock: int = 1_000_000) -> list[str]:
    """`count` active products {prefix}0001... with at least `stock` units available, received
    through inventory.services (so the stock ledger stays right). Idempotent."""
    from django.db import transaction

    from inventory.models import Stock
    from inventory.services import receive_stock
    from shop.models import Product

    skus = [f"{prefix}{i:04d}" for i in range(1, count + 1)]
    with transaction.atomic():  # signals bump the hot-cache generation once, on commit
        existing = {p.sku: p for p in Product.objects.filter(sku__in=skus)}
        for i, sku in enumerate(skus, start=1):
            product = existing.get(sku)
            if product is None:
                Product.objects.create(sku=sku, name=f"Bench product {i}", price=price + i)
            elif not product.is_active:
                product.is_active = True
                product.save(update_fields=["is_active", "updated_at"])
        available = dict(Stock.objects.filter(product_id__in=skus).values_list("product_id", "available"))
        for sku in skus:
            if available.get(sku, 0) < stock // 2:
                receive_stock(sku=sku, quantity=stock - available.get(sku, 0), note="bench")
    return skus


# --- Load generation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One HTTP request; a load run cycles through a list of them."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class LoadResult:
    name: str
    client: str
    concurrency: int
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int  # connect/read/write/timeout errors
    bad_status: int  # responses with status >= 400 (wrk) or not 2xx (python)
    server_cpu_seconds: float | None = None  # set by run_load when given the server

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_request(self) -> float | None:
        if self.server_cpu_seconds is None or not self.requests:
            return None
        return self.server_cpu_seconds * 1000 / self.requests


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_load(
    name: str,
    target: str | Gunicorn,
    specs: Sequence[Spec],
    *,
    concurrency: int = 16,
    duration: float | None = 10.0,
    requests: int | None = None,
    client: str = "auto",
    client_threads: int = 1,
) -> LoadResult:
    """Closed loop: `concurrency` keep-alive connections, each sending its next request as soon
    as the previous answer arrived, cycling through `specs`. Stops after `requests` requests
    (when given) or `duration` seconds; a request-count run is still capped in time.

    `target` is a base URL or a Gunicorn, whose CPU time during the run is then recorded too."""
    if isinstance(target, Gunicorn):
        cpu_before = target.cpu_seconds()
        result = run_load(
            name,
            target.base_url,
            specs,
            concurrency=concurrency,
            duration=duration,
            requests=requests,
            client=client,
            client_threads=client_threads,
        )
        result.server_cpu_seconds = target.cpu_seconds() - cpu_before
        return result
    base_url = target
    if not base_url.startswith(f"http://{HOST}:"):
        raise ValueError(f"the load generator only targets {HOST}, not {base_url}")
    if not specs:
        raise ValueError("no requests to send")
    if requests is None and not duration:
        raise ValueError("give a request count or a duration")
    if client == "auto":
        client = "wrk" if wrk_available() else "python"
    if client == "wrk":
        return _run_wrk(name, base_url, specs, concurrency, duration, requests, client_threads)
    if client == "python":
        return _run_python(name, base_url, specs, concurrency, duration, requests)
    raise ValueError(f"unknown client {client!r}")


def _lua_string(value: str | bytes) -> str:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return '"' + "".join(c if c.isalnum() or c in " -_./:{}[],'" else f"\\{ord(c)}" for c in value) + '"'


# LuaJIT's ffi gives wrk's threads a wall clock, used for the request-count mode (wrk itself only
# knows durations: it sleeps -d, so a thread that stopped early reports its own elapsed time).
_WRK_SCRIPT = r"""
local ffi = require("ffi")
ffi.cdef[[ typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
           int clock_gettime(int, bench_timespec *); ]]
local ts = ffi.new("bench_timespec")
local function now_us() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3 end

local specs = {
%(specs)s
}
local host = %(host)s
local threads, counter = {}, 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local reqs, n, i
function init(args)
  reqs = {}
  for k, s in ipairs(specs) do
    local headers = { Host = host }
    for hk, hv in pairs(s[3]) do headers[hk] = hv end
    local body = nil
    if s[4] ~= "" then body = s[4] end
    reqs[k] = wrk.format(s[1], s[2], headers, body)
  end
  n = #reqs
  i = (id * 7919) %% n   -- threads start at different places in the list
  limit = tonumber(args[1]) or 0
  started = now_us()
  elapsed = 0
  answered = 0
end

function request()
  i = i %% n + 1
  return reqs[i]
end

%(response)s

function done(summary, latency, requests)
  local longest = 0
  for _, t in ipairs(threads) do
    local e = t:get("elapsed") or 0
    if e > longest then longest = e end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %%d, "duration_us": %%d, "thread_elapsed_us": %%d, "connect": %%d, "read": %%d, ' ..
    '"write": %%d, "status": %%d, "timeout": %%d, "p50_us": %%d, "p90_us": %%d, "p99_us": %%d, "max_us": %%d}\n',
    summary.requests, summary.duration, longest, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""

_WRK_COUNTING = r"""
function response(status, headers, body)
  answered = answered + 1
  if answered == limit then
    elapsed = now_us() - started
    io.write("BENCH_THREAD_DONE\n")
    io.flush()
    wrk.thread:stop()
  end
end
"""


def _run_wrk(name, base_url, specs, concurrency, duration, requests, client_threads) -> LoadResult:
    threads = max(1, min(client_threads, concurrency))
    per_thread = math.ceil(requests / threads) if requests else 0
    cap = duration if requests is None else max(duration or 0, 600.0)  # a count run is bounded too
    host = base_url.removeprefix("http://")
    lines = []
    for spec in specs:
        headers = ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in spec.headers.items())
        method, path, body = _lua_string(spec.method), _lua_string(spec.path), _lua_string(spec.body)
        lines.append(f"  {{{method}, {path}, {{{headers}}}, {body}}},")
    script = _WRK_SCRIPT % {
        "specs": "\n".join(lines),
        "host": _lua_string(host),
        "response": _WRK_COUNTING if requests else "",
    }
    with tempfile.NamedTemporaryFile("w", prefix="bench-", suffix=".lua", delete=False) as f:
        f.write(script)
    cmd = [
        "wrk", "--latency", "-t", str(threads), "-c", str(max(concurrency, threads)),
        "-d", f"{max(1, math.ceil(cap))}s", "--timeout", "10s", "-s", f.name, base_url + "/", "--", str(per_thread),
    ]  # fmt: skip
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output, finished = [], 0
        for line in proc.stdout:
            output.append(line)
            if line.startswith("BENCH_THREAD_DONE"):
                finished += 1
                if finished == threads:
                    proc.send_signal(signal.SIGINT)  # wrk then stops sleeping and reports
        proc.wait(timeout=60)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(f.name)
    text = "".join(output)
    match = re.search(r"^BENCH_JSON (.*)$", text, re.MULTILINE)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{text}")
    data = json.loads(match.group(1))
    seconds = (data["thread_elapsed_us"] if requests else data["duration_us"]) / 1e6
    return LoadResult(
        name=name,
        client=f"wrk -t{threads}",
        concurrency=max(concurrency, threads),
        requests=data["requests"],
        seconds=seconds,
        p50_ms=data["p50_us"] / 1000,
        p90_ms=data["p90_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        max_ms=data["max_us"] / 1000,
        errors=data["connect"] + data["read"] + data["write"] + data["timeout"],
        bad_status=data["status"],
    )


def _percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return 0.0
    rank = max(0, math.ceil(pct / 100 * len(sorted_values)) - 1)
    return sorted_values[rank]


def _run_python(name, base_url, specs, concurrency, duration, requests) -> LoadResult:
    """Fallback client: one thread and one keep-alive http.client connection per concurrent
    request. It shares the GIL and the CPUs with the server, so its figures are lower than wrk's."""
    host, port = base_url.removeprefix("http://").split(":")
    port = int(port)
    tickets = itertools.count() if requests else None
    deadline = time.perf_counter() + (duration if requests is None else max(duration or 0, 600.0))
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    counts = [[0, 0] for _ in range(concurrency)]  # errors, bad status
    prepared = [(s.method, s.path, s.body or None, {"Host": host, **s.headers}) for s in specs]
    start_gate = threading.Barrier(concurrency + 1)

    def worker(slot: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        mine, errs = latencies[slot], counts[slot]
        position = (slot * 7919) % len(prepared)
        start_gate.wait()
        while True:
            if tickets is not None and next(tickets) >= requests:
                break
            if time.perf_counter() >= deadline:
                break
            method, path, body, headers = prepared[position]
            position = (position + 1) % len(prepared)
            began = time.perf_counter()
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                errs[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=10)
                continue
            mine.append(time.perf_counter() - began)
            if not 200 <= response.status < 300:
                errs[1] += 1
        conn.close()

    workers = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in range(concurrency)]
    for w in workers:
        w.start()
    start_gate.wait()
    began = time.perf_counter()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - began
    values = sorted(itertools.chain.from_iterable(latencies))
    return LoadResult(
        name=name,
        client=f"python x{concurrency}",
        concurrency=concurrency,
        requests=len(values),
        seconds=seconds,
        p50_ms=_percentile(values, 50) * 1000,
        p90_ms=_percentile(values, 90) * 1000,
        p99_ms=_percentile(values, 99) * 1000,
        max_ms=(values[-1] * 1000) if values else 0.0,
        errors=sum(c[0] for c in counts),
        bad_status=sum(c[1] for c in counts),
    )


# --- Small helpers ------------------------------------------------------------------------------


def _cpu_times() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields), idle


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Share of all CPUs busy over `seconds` (0..1), None where /proc/stat is missing. A bench run
    while something else loads the machine measures that something too."""
    try:
        total0, idle0 = _cpu_times()
        time.sleep(seconds)
        total1, idle1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def warn_if_busy(threshold: float = 0.2) -> None:
    busy = cpu_busy()
    if busy is not None and busy > threshold:
        print(
            f"warning: the CPUs were {busy:.0%} busy before the bench started (os.cpu_count() = {os.cpu_count()}):"
            " other processes compete with the server and the client, figures will be low and noisy",
            file=sys.stderr,
        )


def http_call(base_url: str, spec: Spec, timeout: float = 10.0) -> tuple[int, bytes]:
    """One request, for checking what a bench is about to hammer."""
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(spec.method, spec.path, body=spec.body or None, headers=spec.headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def ensure_user_ids(count: int, *, prefix: str, password: str | None = None) -> list[int]:
    """Users prefix00001..., created in bulk with one password hash (unusable when None); their ids."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import transaction

    user_model = get_user_model()
    names = [f"{prefix}{i:05d}" for i in range(1, count + 1)]
    with transaction.atomic():
        existing = set(user_model.objects.filter(username__in=names).values_list("username", flat=True))
        missing = [name for name in names if name not in existing]
        if missing:
            hashed = make_password(password)
            user_model.objects.bulk_create(
                [user_model(username=name, password=hashed, is_active=True) for name in missing],
                batch_size=2000,
                ignore_conflicts=True,  # a concurrent run created some
            )
        ids = dict(user_model.objects.filter(username__in=names).values_list("username", "id"))
    return [ids[name] for name in names]


def fill_carts(carts: list[tuple[int, dict[str, int]]]) -> None:
    """Exactly these carts in Redis (cart:{customer_id}), as the cart API would leave them."""
    from django.conf import settings
    from django_redis import get_redis_connection

    from cart.storage import cart_key

    redis = get_redis_connection("default")
    for start in range(0, len(carts), 2000):
        pipe = redis.pipeline(transaction=False)
        for customer_id, lines in carts[start : start + 2000]:
            key = cart_key(customer_id)
            pipe.delete(key)
            pipe.hset(key, mapping=lines)
            pipe.expire(key, settings.CART_TTL_SECONDS)
        pipe.execute()
