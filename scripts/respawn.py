"""Run a command, and start it again whenever it dies.

    python scripts/respawn.py COMMAND [ARG...]

`make run` starts every process through honcho, which stops them all when one
ends: a crashed relay would take the web server, Celery and the consumers
down with it. Wrapped in this loop, a crash is a blip, as it is under the
compose file's `restart: unless-stopped`. Restarts back off from 1 s, doubling
up to 30 s; a run that lasted a minute starts the backoff again. SIGTERM or
SIGINT (honcho sends SIGTERM to the whole process group) stop the command and
the loop, which then exits with the command's status (128 + N for signal N).
"""

import signal
import subprocess
import sys
import threading
import time

FIRST_BACKOFF, MAX_BACKOFF, HEALTHY_RUN = 1.0, 30.0, 60.0


def main(command: list[str]) -> int:
    stopping = threading.Event()
    child: subprocess.Popen | None = None

    def stop(signum, frame) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff = FIRST_BACKOFF
    while True:
        started = time.monotonic()
        child = subprocess.Popen(command)
        if stopping.is_set():  # asked to stop while it was starting
            child.terminate()
        status = child.wait()
        if stopping.is_set():
            return status
        backoff = FIRST_BACKOFF if time.monotonic() - started > HEALTHY_RUN else backoff
        name = " ".join(command)[:80]
        print(
            f"respawn: {name} exited with {status}; starting it again in {backoff:.0f} s", file=sys.stderr, flush=True
        )
        if stopping.wait(backoff):
            return status
        backoff = min(backoff * 2, MAX_BACKOFF)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    status = main(sys.argv[1:])
    sys.exit(128 - status if status < 0 else status)  # killed by signal N: 128 + N, as a shell says
