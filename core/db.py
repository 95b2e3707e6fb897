from collections.abc import Iterable
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


def insert_unless_exists(instance: models.Model, *, conflict_fields: list[str]) -> int | None:
    """INSERT ... ON CONFLICT (conflict_fields) DO NOTHING RETURNING id.

    The unique index decides who wins: a concurrent twin waits for the winner's
    transaction and then finds the key taken. Returns the new primary key, or
    None when a row with the same key exists. One statement, no savepoint.
    """
    sql, fields = _insert_sql(type(instance), tuple(conflict_fields))
    values = [f.get_db_prep_save(f.pre_save(instance, add=True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row:
        instance.pk = row[0]
        instance._state.adding = False
        return row[0]
    return None


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
