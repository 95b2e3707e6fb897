"""Idle CPU priority for batch work that shares a host with shoppers' requests
(the queue writer, settings.QUEUE_WRITER_IDLE_PRIORITY).

Linux's SCHED_IDLE runs a thread only when no ordinary thread wants the CPU,
and an ordinary thread that wakes takes the CPU from it at once; a nice level
only shares the CPU out by weight, and not at all across the kernel's session
groups (autogroup). A writer draining a queue does half its work in its
PostgreSQL backend, and PostgreSQL has no priority per session, so when the
database runs on this host the writer lowers its own backend too. It does so
only when it can prove the backend is its own peer: over TCP, the server sees
the very port this client connected from (no pooler that would later hand the
backend to someone else, no NAT) and the pid is a local `postgres` process
serving that port; over a Unix socket, the socket's peer is that pid. Measured:
bench/queue.py part 3, regular orders' p99 during a drain, 17.9 ms with the
writer at nice 10 and its backend at nice 10, 14.0 with both idle, against
7.6 with no sale (bench/README.md)."""

import logging
import os
import socket
import struct
from pathlib import Path

from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)


def idle_process() -> None:
    """This process at idle priority (the calling thread and every thread it
    starts from now on: call it first), and each database backend it is or
    will be connected to, where idle_backend can."""
    idle_priority()
    connection_created.connect(_idle_backend_on_connect, dispatch_uid=__name__)
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            idle_backend(connection)


def idle_priority(pid: int = 0) -> bool:
    """SCHED_IDLE for a thread (0: this one, and the threads it starts from now
    on); False where the system has no such policy or refuses it."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError) as error:
        logger.info("idle priority not set for %s: %r", pid or "this process", error)
        return False
    return True


def own_backend_pid(connection) -> int | None:
    """The pid of the PostgreSQL backend behind a Django connection when it runs
    on this host and talks to this client directly, else None."""
    connection.ensure_connection()
    driver = connection.connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), inet_client_port()")
        pid, client_port = cursor.fetchone()
    with socket.socket(fileno=os.dup(driver.pgconn.socket)) as sock:
        if sock.family == socket.AF_UNIX:
            return pid if _peer_pid(sock) == pid else None
        if not _loopback(sock.getpeername()[0]) or client_port != sock.getsockname()[1]:
            return None
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # another pid namespace (a container), or gone
        return None
    return pid if title.startswith(b"postgres") and f"({client_port})".encode() in title else None


def idle_backend(connection) -> bool:
    """SCHED_IDLE for the connection's own backend when own_backend_pid finds it."""
    pid = own_backend_pid(connection)
    return pid is not None and idle_priority(pid)


def _idle_backend_on_connect(sender, connection, **kwargs) -> None:
    if connection.vendor == "postgresql":
        idle_backend(connection)


def _peer_pid(sock: socket.socket) -> int:
    pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid


def _loopback(address: str) -> bool:
    return address in ("127.0.0.1", "::1") or address.startswith("127.") or address == "::ffff:127.0.0.1"
