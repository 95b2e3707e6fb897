"""The relay's helper threads (a serial loop waited on PostgreSQL most of the
time: bench/README.md, "Figures behind code choices"): while the relay produces batch N, one
reads batch N+1 on the run's connection, in its snapshot; while Kafka
acknowledges batch N and batch N+1 is produced, the other marks batch N
published with one statement, on a second connection."""

from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connection

from outbox.relay import sql


class Marker:
    """Marks batches published on a connection of its own, in one helper
    thread, so that PostgreSQL writes one batch while the relay reads and
    produces the next. Started only when a run has more than one batch."""

    def __init__(self) -> None:
        self.executor: ThreadPoolExecutor | None = None
        self.futures: list[Future] = []

    def mark(self, ids: list[int], *, in_background: bool) -> None:
        if not in_background and self.executor is None:
            sql.mark_published(ids)  # one batch: nothing to overlap with
            return
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-marker")
        self.futures.append(self.executor.submit(sql.mark_published, ids))

    def wait(self) -> None:
        """Until every mark committed; raises the first one that failed."""
        futures, self.futures = self.futures, []
        for future in futures:
            future.result()

    def close(self) -> None:
        if self.executor is not None:
            self.executor.submit(_close_connection).result()
            self.executor.shutdown()
            self.executor = None


class ReadAhead:
    """Reads the run's next batch in a helper thread, on the run's connection
    and snapshot, while the relay produces the current one. The relay's own
    thread does not use that connection meanwhile."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.raw = connection.connection
        self.executor: ThreadPoolExecutor | None = None
        self.next: Future | None = None

    def start(self, *, after: int) -> None:
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-reader")
        self.next = self.executor.submit(sql.read_pending, self.limit, after=after, raw=self.raw)

    def take(self) -> list[sql.PendingEvent]:
        future, self.next = self.next, None
        return future.result()

    def close(self) -> None:
        """Waits for a read still running: the run's transaction ends after it."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)
            self.executor = None


def _close_connection() -> None:
    connection.close()  # the calling thread's connection
