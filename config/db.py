from django.db import connection, models


def insert_unless_exists(instance: models.Model, *, conflict_fields: list[str]) -> int | None:
    """INSERT ... ON CONFLICT (conflict_fields) DO NOTHING RETURNING id.

    The unique index decides who wins: a concurrent twin waits for the winner's
    transaction and then finds the key taken. Returns the new primary key, or
    None when a row with the same key exists. One statement, no savepoint.
    """
    meta = instance._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    conflict = ", ".join(connection.ops.quote_name(meta.get_field(name).column) for name in conflict_fields)
    values = [f.get_db_prep_save(f.pre_save(instance, add=True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({columns}) VALUES ({placeholders}) "
            f"ON CONFLICT ({conflict}) DO NOTHING RETURNING {connection.ops.quote_name(meta.pk.column)}",
            values,
        )
        row = cursor.fetchone()
    if row:
        instance.pk = row[0]
        instance._state.adding = False
        return row[0]
    return None
