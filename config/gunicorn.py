"""gunicorn settings (`--config python:config.gunicorn`); the command line may override."""

import os

from config.env import env, env_int

bind = env("WEB_BIND", "127.0.0.1:8000")
workers = env_int("WEB_WORKERS", 2)
threads = env_int("WEB_THREADS", 4)
graceful_timeout = 10
accesslog = None  # the request-id middleware writes one JSON line per request


def child_exit(server, worker):
    # Multiprocess metrics: a dead worker's live gauges must stop counting.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
