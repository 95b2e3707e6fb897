"""Idle CPU priority for the queue writer (core/priority.py): its threads, and
its own PostgreSQL backend only when the backend is provably its peer."""

import os
import socket
import threading
from pathlib import Path

import pytest
from django.db import connections
from django.db.backends.signals import connection_created

from core.priority import idle_backend, idle_priority, idle_process, own_backend_pid

pytestmark = pytest.mark.django_db(transaction=True)


def policy(pid: int) -> int:
    """The scheduling policy of a process or thread (field 41 of /proc/<pid>/stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[38])


def in_thread(body):
    """body() on a thread of its own (a policy set there ends with it); its result or its exception."""
    outcome = {}

    def run():
        try:
            outcome["value"] = body()
        except BaseException as error:  # noqa: BLE001 - raised again below
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def new_connection(**changes):
    connection = connections.create_connection("default")
    connection.settings_dict = {**connection.settings_dict, **changes}
    return connection


def test_idle_priority_holds_for_the_thread_and_the_threads_it_starts():
    def body():
        assert idle_priority()
        child = in_thread(lambda: os.sched_getscheduler(0))
        return os.sched_getscheduler(0), child

    assert in_thread(body) == (os.SCHED_IDLE, os.SCHED_IDLE)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's thread untouched


def test_a_direct_connection_on_this_host_has_its_backend_made_idle():
    connection = new_connection()
    try:
        pid = own_backend_pid(connection)
        assert pid is not None and policy(pid) == os.SCHED_OTHER
        assert idle_backend(connection)
        assert policy(pid) == os.SCHED_IDLE
        with connection.cursor() as cursor:  # the same backend, still serving this client
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] == pid
    finally:
        connection.close()


class Forwarder:
    """A TCP relay to the database, as a connection pooler would sit in between."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def close(self):
        self.listener.close()


def test_a_backend_behind_a_relay_is_left_alone():
    settings = connections["default"].settings_dict
    relay = Forwarder(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    connection = new_connection(HOST="127.0.0.1", PORT=str(relay.port))
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        assert own_backend_pid(connection) is None
        assert not idle_backend(connection)
        assert policy(pid) == os.SCHED_OTHER
    finally:
        connection.close()
        relay.close()


def test_idle_process_makes_each_new_backend_idle():
    def body():
        connection = new_connection()
        try:
            idle_process()
            with connection.cursor() as cursor:  # connects now: connection_created
                cursor.execute("SELECT pg_backend_pid()")
                pid = cursor.fetchone()[0]
            return os.sched_getscheduler(0), policy(pid)
        finally:
            connection_created.disconnect(dispatch_uid="core.priority")
            connection.close()

    assert in_thread(body) == (os.SCHED_IDLE, os.SCHED_IDLE)


def test_over_a_unix_socket_the_peer_is_known_by_its_credentials():
    from core.priority import _peer_pid

    mine, theirs = socket.socketpair(socket.AF_UNIX)
    with mine, theirs:
        assert _peer_pid(mine) == os.getpid()
