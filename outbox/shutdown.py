import signal
import threading


def stop_on_sigterm() -> threading.Event:
    """An event set by SIGTERM or SIGINT: long-running loops finish their current
    item, commit and close instead of dying mid-way."""
    stop = threading.Event()

    def handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
