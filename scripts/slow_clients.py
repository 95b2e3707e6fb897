"""The slow-client drill: sockets that each send one byte of a request every few
seconds, and /healthz probed meanwhile, through the shop's documented front (nginx
with deploy/nginx.conf.template before gunicorn) and, with --direct, against
gunicorn alone for comparison.

    .venv/bin/python scripts/slow_clients.py [--clients 50] [--seconds 20] [--direct]

Starts its own gunicorn (config.wsgi, as `make run` does: 2 workers x 4 threads, DEBUG
on) and nginx on free 127.0.0.1 ports, and stops both however it ends. Prints the
probes answered within 2 s, per target; exits 1 when a probe through the front failed.
"""

import argparse
import contextlib
import os
import shutil
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TRICKLE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"x" * 4000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=1).read()
            return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {seconds:g} s")


def start_gunicorn(port: int, log) -> subprocess.Popen:
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "config.settings"}
    return subprocess.Popen(
        [
            str(ROOT / ".venv/bin/gunicorn"),
            "config.wsgi",
            "--config",
            "python:config.gunicorn",
            "--bind",
            f"127.0.0.1:{port}",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def start_nginx(port: int, upstream: int, workdir: Path, log) -> subprocess.Popen:
    """nginx with the deployment's server block, filled in as the nginx image does."""
    server = string.Template((ROOT / "deploy/nginx.conf.template").read_text()).safe_substitute(
        SHOP_UPSTREAM=f"127.0.0.1:{upstream}", SHOP_LISTEN=f"127.0.0.1:{port}"
    )
    (workdir / "shop.conf").write_text(server)
    temp = "".join(
        f"{kind}_temp_path {workdir}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (workdir / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {workdir}/nginx.pid;\nerror_log {workdir}/error.log;\n"
        + ("user root;\n" if os.geteuid() == 0 else "")
        + f"events {{ worker_connections 4096; }}\nhttp {{\naccess_log off;\n{temp}include {workdir}/shop.conf;\n}}\n"
    )
    return subprocess.Popen(
        [NGINX, "-c", str(workdir / "nginx.conf"), "-p", str(workdir)], stdout=log, stderr=subprocess.STDOUT
    )


def trickle(port: int, interval: float, stop: threading.Event) -> None:
    """One slow client: a byte of a request every `interval` seconds; connects again when cut off."""
    while not stop.is_set():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            for byte in TRICKLE:
                sock.sendall(bytes([byte]))
                if stop.wait(interval):
                    return


def drill(port: int, *, clients: int, seconds: float, interval: float) -> tuple[int, int, float]:
    """(probes answered 200 within 2 s, probes sent, slowest answered in ms) while `clients` trickle."""
    stop = threading.Event()
    threads = [threading.Thread(target=trickle, args=(port, interval, stop), daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(min(2.0, seconds / 4))  # the slow clients are connected and have sent their first bytes
    ok = sent = 0
    slowest = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sent += 1
        began = time.monotonic()
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200:
                ok += 1
                slowest = max(slowest, (time.monotonic() - began) * 1000)
        time.sleep(max(0.0, 0.5 - (time.monotonic() - began)))
    stop.set()
    return ok, sent, slowest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--seconds", type=float, default=20.0, help="probing time per target")
    p.add_argument("--interval", type=float, default=4.0, help="seconds between a slow client's bytes")
    p.add_argument("--direct", action="store_true", help="also drill gunicorn alone, for comparison")
    args = p.parse_args(argv)
    web, front = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="slow-clients-"))
    log = open(workdir / "servers.log", "wb")
    processes = [start_gunicorn(web, log)]
    try:
        wait_for(f"http://127.0.0.1:{web}/healthz")
        processes.append(start_nginx(front, web, workdir, log))
        wait_for(f"http://127.0.0.1:{front}/healthz")
        targets = [("through nginx", front)] + ([("gunicorn alone", web)] if args.direct else [])
        failed_front = False
        for name, port in targets:
            ok, sent, slowest = drill(port, clients=args.clients, seconds=args.seconds, interval=args.interval)
            print(
                f"{name}: {args.clients} slow clients (a byte every {args.interval:g} s); /healthz answered "
                f"{ok}/{sent} within 2 s, slowest {slowest:.0f} ms",
                flush=True,
            )
            failed_front |= port == front and ok < sent
            time.sleep(1)
        return 1 if failed_front else 0
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
            process.kill()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
