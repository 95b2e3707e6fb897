"""Records the row locks a piece of code takes, transaction by transaction, and
says where it goes against core/locks.py's LOCK_ORDER.

A statement locks rows when it is a SELECT … FOR UPDATE (the tables after OF,
or every table it reads), an UPDATE, a DELETE, or an INSERT … ON CONFLICT DO
UPDATE. A plain INSERT is not counted: the rows it writes are new, nobody else
can be waiting for them. Going back to a kind of row the transaction locked
already (or one of its group) is allowed: its rows are held; locking a kind
that ranks before one already held is what can deadlock, and is reported."""

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection

from core.locks import RANK

_NAME = r'"?(\w+)"?'
_FOR_UPDATE = re.compile(r"\bFOR (?:NO KEY )?UPDATE\b(?: OF ([^;]+?))?(?: SKIP LOCKED| NOWAIT)?\s*$", re.I)
_UPDATE = re.compile(r"(?<!FOR )(?<!KEY )(?<!DO )\bUPDATE\s+" + _NAME, re.I)
_DELETE = re.compile(r"\bDELETE\s+FROM\s+" + _NAME, re.I)
_UPSERT = re.compile(r"\bINSERT\s+INTO\s+" + _NAME + r"[^;]*?\bON CONFLICT\b[^;]*?\bDO UPDATE\b", re.I)
_READS = re.compile(r"\b(?:FROM|JOIN)\s+" + _NAME, re.I)


def locked_tables(sql: str) -> list[str]:
    """The tables whose rows `sql` locks, in the order the statement names them."""
    tables = []
    if found := _FOR_UPDATE.search(sql):
        named = found.group(1)
        tables += [t.strip().strip('"') for t in named.split(",")] if named else _READS.findall(sql[: found.start()])
    tables += _UPDATE.findall(sql) + _DELETE.findall(sql) + _UPSERT.findall(sql)
    return [table for table in tables if table.upper() not in ("OF", "SET")]


@dataclass
class LockRecord:
    transactions: list[list[tuple[str, ...]]] = field(default_factory=list)  # each: the locking statements' tables

    def broken(self) -> list[str]:
        """Each lock that went against the declared order, or that names a table it does not declare."""
        found = []
        for statements in self.transactions:
            held: set[str] = set()
            for tables in statements:
                top = max((RANK[t] for t in held), default=-1)
                for table in tables:
                    if table not in RANK:
                        found.append(f"{table}: not in core/locks.py LOCK_ORDER")
                    elif RANK[table] < top and not any(RANK[t] == RANK[table] for t in held):
                        found.append(f"{table} locked after {sorted(held, key=RANK.get)[-1]}")
                held.update(t for t in tables if t in RANK)
        return found

    def kinds(self) -> list[list[str]]:
        """Per transaction, the kinds of rows in the order first locked."""
        return [list(dict.fromkeys(t for tables in statements for t in tables)) for statements in self.transactions]


@contextmanager
def recording_locks():
    """Record the locks taken inside the block by this thread's connection, in a
    test inside a transaction (pytest-django's default): a transaction of the
    code is then the outermost atomic block it opens, a savepoint of the test's
    transaction with a name of its own; a statement outside any is its own."""
    record = LockRecord()
    depth = len(connection.savepoint_ids)
    assert connection.in_atomic_block, "record inside the test's transaction (not transaction=True)"
    last = [None]

    def wrapper(execute, sql, params, many, context):
        tables = tuple(locked_tables(sql))
        if tables:
            ids = connection.savepoint_ids
            current = ids[depth] if len(ids) > depth and ids[depth] else object()
            if current != last[0]:
                record.transactions.append([])
                last[0] = current
            record.transactions[-1].append(tables)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield record
