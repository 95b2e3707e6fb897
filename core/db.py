from collections.abc import Iterable, Sequence
from functools import cache

from django.db import connection, models


@cache
def _insert_sql(model: type[models.Model], conflict_fields: tuple[str, ...]) -> tuple[str, list[models.Field]]:
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    conflict = ", ".join(quote(meta.get_field(name).column) for name in conflict_fields)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders}) "
        f"ON CONFLICT ({conflict}) DO NOTHING RETURNING {quote(meta.pk.column)}"
    )
    return sql, fields


@cache
def _with_children_sql(
    model: type[models.Model], conflict_fields: tuple[str, ...], child_model: type[models.Model]
) -> tuple[str, list[models.Field], models.Field, list[models.Field]]:
    """The parent's INSERT as a data-modifying CTE, the children inserted from
    it with one array per column: no parent row (a conflict), no children."""
    parent_sql, fields = _insert_sql(model, conflict_fields)
    link = next(f for f in child_model._meta.concrete_fields if f.is_relation and f.related_model is model)
    child_fields = [f for f in child_model._meta.concrete_fields if not f.primary_key and f is not link]
    quote = connection.ops.quote_name
    pk = quote(model._meta.pk.column)
    columns = ", ".join(quote(f.column) for f in [link, *child_fields])
    arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in child_fields)
    sql = (
        f"WITH parent AS ({parent_sql}), children AS ("
        f"INSERT INTO {quote(child_model._meta.db_table)} ({columns}) "
        f"SELECT parent.{pk}, child.* FROM parent, unnest({arrays}) AS child RETURNING 1) "
        f"SELECT {pk} FROM parent"
    )
    return sql, fields, link, child_fields


def insert_unless_exists(
    instance: models.Model, *, conflict_fields: list[str], children: Sequence[models.Model] = ()
) -> int | None:
    """INSERT ... ON CONFLICT (conflict_fields) DO NOTHING RETURNING id.

    The unique index decides who wins: a concurrent twin waits for the winner's
    transaction and then finds the key taken. Returns the new primary key, or
    None when a row with the same key exists. One statement, no savepoint.

    `children`, rows of one model with a foreign key to the instance (an order's
    items), are inserted by the same statement when the instance is, and not at
    all when it is not: a k-line checkout sends one statement for the order and
    its items where bulk_create added a second (bench/checkout.py counts them).
    """
    if not children:
        sql, fields = _insert_sql(type(instance), tuple(conflict_fields))
        values = _prepared(fields, instance)
    else:
        sql, fields, link, child_fields = _with_children_sql(type(instance), tuple(conflict_fields), type(children[0]))
        values = _prepared(fields, instance) + [[_prepared([f], child)[0] for child in children] for f in child_fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row:
        instance.pk = row[0]
        instance._state.adding = False
        for child in children:
            setattr(child, link.attname, row[0])
            child._state.adding = False
        return row[0]
    return None


def _prepared(fields: list[models.Field], instance: models.Model) -> list:
    return [f.get_db_prep_save(f.pre_save(instance, add=True), connection) for f in fields]


def copy_rows(model: type[models.Model], fields: list[str], rows: Iterable[tuple]) -> None:
    """COPY rows (values in the order of `fields`, ready for the database) into the
    model's table. bulk_create's bill at 500 rows is compiling the INSERT and
    quoting every value as text on the client; COPY sends them as they are."""
    meta, quote = model._meta, connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(name).column) for name in fields)
    sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
