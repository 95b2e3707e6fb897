"""scripts/respawn.py, the restart loop under `make run`: tried with real processes and signals."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RESPAWN = Path(__file__).resolve().parents[2] / "scripts" / "respawn.py"
# Prints its pid, then sleeps: stands in for the relay or a consumer.
SLEEPER = [sys.executable, "-u", "-c", "import os, time; print(os.getpid()); time.sleep(60)"]


def start(command: list[str]) -> subprocess.Popen:
    # honcho starts each process in a session of its own and signals the whole group
    return subprocess.Popen(
        [sys.executable, str(RESPAWN), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def next_pid(loop: subprocess.Popen) -> int:
    return int(loop.stdout.readline())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent) is not alive either
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    return not alive(pid)


@pytest.mark.parametrize("deliver", ["to_the_group", "to_the_loop"])
def test_respawn_restarts_a_killed_process_and_stops_on_sigterm(deliver):
    loop = start(SLEEPER)
    try:
        first = next_pid(loop)
        os.kill(first, signal.SIGKILL)  # a crash no handler can see
        second = next_pid(loop)  # started again, after the first 1 s backoff
        assert second != first and alive(second) and loop.poll() is None
        if deliver == "to_the_group":
            os.killpg(loop.pid, signal.SIGTERM)
        else:
            loop.send_signal(signal.SIGTERM)
        assert loop.wait(timeout=5) == 128 + signal.SIGTERM  # the command's own status, as a shell gives it
        assert wait_gone(second)
        assert "starting it again in 1 s" in loop.stderr.read()
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)


def test_respawn_stops_while_it_waits_to_restart():
    loop = start([sys.executable, "-c", "import sys; print(1, flush=True); sys.exit(3)"])
    try:
        assert next_pid(loop) == 1
        assert "starting it again in 1 s" in loop.stderr.readline()  # the command has exited; the loop waits
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(timeout=2) == 3
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
