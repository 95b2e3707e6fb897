"""Records the row locks a piece of code takes, transaction by transaction, and
says where it goes against core/locks.py's LOCK_ORDER (kinds of rows; the key
order within a kind is each lock call's own `order_by`, not checked here).

A statement locks rows when it is a SELECT … FOR UPDATE (the tables after OF,
or every table it reads), an UPDATE, a DELETE, or an INSERT … ON CONFLICT DO
UPDATE. A plain INSERT is not counted: the rows it writes are new, and the
KEY SHARE lock it takes on the rows it refers to never waits on the shop's
locks (core.locks.for_update takes FOR NO KEY UPDATE). Going back to a kind of row the transaction locked
already (or one of its group) is allowed: its rows are held; locking a kind
that ranks before one already held is what can deadlock, and is reported."""

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection

from core.locks import RANK

_NAME = r'(?:ONLY\s+)?(?:"?\w+"?\.)?"?(\w+)"?'  # a table, perhaps ONLY and schema-qualified
_ROW_LOCK = re.compile(
    r"\bFOR (?:NO KEY UPDATE|UPDATE|SHARE|KEY SHARE)\b"  # the lock
    r"((?:\s+OF\s+[\w\",\s.]+?)?)"  # the tables it names, if any
    r"(?=\s+SKIP LOCKED|\s+NOWAIT|\)|$)",
    re.I,
)
_UPDATE = re.compile(r"(?<!FOR )(?<!KEY )(?<!DO )\bUPDATE\s+(?!SET\b)" + _NAME, re.I)
_DELETE = re.compile(r"\bDELETE\s+FROM\s+" + _NAME, re.I)
_INSERT = re.compile(r"\bINSERT\s+INTO\s+" + _NAME, re.I)
_READS = re.compile(r"\b(?:FROM|JOIN)\s+" + _NAME, re.I)


def locked_tables(sql: str) -> list[str]:
    """The tables whose rows `sql` locks, in the order the statement names them:
    SELECT … FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE, also inside a
    subquery (the tables after OF, or every table read before the clause),
    UPDATE, DELETE, and an INSERT whose own part has ON CONFLICT … DO UPDATE."""
    sql = sql.strip().rstrip(";")
    tables = []
    for found in _ROW_LOCK.finditer(sql):
        named = found.group(1).strip()
        if named:
            tables += [name.strip().strip('"').split(".")[-1].strip('"') for name in named[2:].split(",")]
        else:
            tables += _READS.findall(sql[: found.start()])
    tables += _UPDATE.findall(sql) + _DELETE.findall(sql)
    inserts = list(_INSERT.finditer(sql))
    ends = [each.start() for each in inserts[1:]] + [len(sql)]
    for each, end in zip(inserts, ends[: len(inserts)], strict=True):
        own = sql[each.start() : end]
        if re.search(r"\bON CONFLICT\b.*?\bDO UPDATE\b", own, re.I | re.S):
            tables.append(each.group(1))
    return tables


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
