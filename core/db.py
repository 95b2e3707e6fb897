from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import sql
from django.utils.asyncio import async_unsafe


@async_unsafe
def execute_kept(statement: str, params: Sequence, alias: str = DEFAULT_DB_ALIAS):
    """Execute `statement` on a driver cursor kept for it and return that cursor,
    for statements whose rows are read at once (checkout's five). Pass the same
    str object every call (a module constant, a cached builder's result).

    psycopg keeps a cursor's parameter adapters only while the cursor runs the
    very same query object again: one cursor taking checkout's five statements
    in turn, or a new cursor per statement, looked every adapter up afresh
    (bench/README.md, "Figures behind code choices"). The cursor is kept
    until the connection changes; never close it.

    What Django's cursor does still happens: the health check, the connection
    opened on first use, a broken transaction refused, driver errors raised as
    django.db errors. While queries are logged or an execute_wrapper is
    installed the statement goes through Django's CursorWrapper, so both see it;
    otherwise through the same steps without its layers, which cost more CPU
    than the statement's own work (bench/README.md). Rows are read
    from the driver's cursor, which raises psycopg's errors: read them at once."""
    db = connections[alias]
    cursor = _kept_cursor(db, statement)
    if db.queries_logged or db.execute_wrappers:
        wrapper = db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
        wrapper.execute(statement, params)
    else:
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            cursor.execute(statement, params)
    return cursor


_KEPT_PER_CONNECTION = 64  # statement shapes; past it the kept cursors start over


def _kept_cursor(db, statement: str):
    db.close_if_health_check_failed()
    kept = db.__dict__.get("_kept_cursors")
    if kept is None or kept[0] is not db.connection or len(kept[1]) >= _KEPT_PER_CONNECTION:
        # The driver's cursors are kept, not Django's wrappers of them: a wrapper
        # points back at the connection's wrapper, and that cycle kept a
        # finished thread's connection open until the garbage collector ran.
        db.ensure_connection()
        kept = db._kept_cursors = (db.connection, {})
    cursor = kept[1].get(statement)
    if cursor is None or cursor.closed:
        with db.wrap_database_errors:
            cursor = kept[1][statement] = db.create_cursor()
    return cursor


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
    model: type[models.Model], conflict_fields: tuple[str, ...], child_model: type[models.Model], count: int
) -> tuple[str, list[models.Field], models.Field, list[models.Field]]:
    """The parent's INSERT as a data-modifying CTE, `count` children inserted
    from it: no parent row (a conflict), no children. A VALUES row per child,
    not an array per column: psycopg dumps arrays element by element in Python
    (bench/README.md, "Figures behind code choices")."""
    parent_sql, fields = _insert_sql(model, conflict_fields)
    link = next(f for f in child_model._meta.concrete_fields if f.is_relation and f.related_model is model)
    child_fields = [f for f in child_model._meta.concrete_fields if not f.primary_key and f is not link]
    quote = connection.ops.quote_name
    pk = quote(model._meta.pk.column)
    columns = ", ".join(quote(f.column) for f in [link, *child_fields])
    row = "(" + ", ".join(f"%s::{f.db_type(connection)}" for f in child_fields) + ")"
    sql = (
        f"WITH parent AS ({parent_sql}), children AS ("
        f"INSERT INTO {quote(child_model._meta.db_table)} ({columns}) "
        f"SELECT parent.{pk}, child.* FROM parent, (VALUES {', '.join([row] * count)}) AS child RETURNING 1) "
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
        sql, fields, link, child_fields = _with_children_sql(
            type(instance), tuple(conflict_fields), type(children[0]), len(children)
        )
        values = _prepared(fields, instance) + [value for child in children for value in _prepared(child_fields, child)]
    row = execute_kept(sql, values).fetchone()
    if row:
        instance.pk = row[0]
        instance._state.adding = False
        for child in children:
            setattr(child, link.attname, row[0])
            child._state.adding = False
        return row[0]
    return None


def _prepared(fields: list[models.Field], instance: models.Model) -> list:
    """The instance's values as Field.get_db_prep_save(Field.pre_save(...))
    would give them. A checkout prepares some twenty values, and the field
    machinery cost more CPU than sending the statement (bench/checkout.py,
    py-spy): values of the plain kinds below are prepared by one cached step."""
    values = []
    for field in fields:
        raw_from, plain = _preparer(field)
        value = getattr(instance, field.attname) if raw_from else field.pre_save(instance, add=True)
        if plain is not None and type(value) is plain[0] and (plain[0] is not datetime or value.tzinfo is not None):
            values.append(value if plain[1] is None else plain[1](value))
        elif plain is not None and value is None:  # NULL: what each of the plain kinds makes of None
            values.append(None)
        else:
            values.append(field.get_db_prep_save(value, connection))
    return values


_TEXT = {"CharField", "TextField", "SlugField", "EmailField"}
_INTEGERS = {
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveBigIntegerField",
    "PositiveSmallIntegerField",
    "AutoField",
    "BigAutoField",
    "SmallAutoField",
}  # get_db_prep_value of each: int(value), then the backend's adapter if it has one


@cache
def _preparer(field: models.Field) -> tuple[bool, tuple[type, object] | None]:
    """(whether pre_save is a plain read of the attribute, (the Python type whose
    values need no field conversion, the backend's adapter or None) or None)."""
    raw_from = type(field).pre_save is models.Field.pre_save or (
        isinstance(field, models.DateTimeField | models.DateField) and not (field.auto_now or field.auto_now_add)
    )
    target = field.target_field if field.is_relation else field
    if field.is_relation and type(field).get_db_prep_save is not models.ForeignKey.get_db_prep_save:
        return raw_from, None
    if type(target).get_db_prep_save is not models.Field.get_db_prep_save:
        return raw_from, None
    kind = target.get_internal_type()
    if kind in _TEXT:
        return raw_from, (str, None)
    if kind == "BooleanField":
        return raw_from, (bool, None)
    if kind in _INTEGERS:  # the backend's typed int where it has one (Int4, Int8); auto fields as they are
        return raw_from, (int, getattr(connection.ops, "integerfield_type_map", {}).get(kind))
    if kind == "DateTimeField" and connection.vendor == "postgresql":  # an aware datetime goes as it is
        return raw_from, (datetime, None)
    return raw_from, None


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


class CompiledUpdate:
    """An ORM conditional UPDATE, compiled once per process and run with fresh
    values: the rule reads as the ORM states it, and a call costs one execute.

        take = CompiledUpdate(
            lambda sku, quantity: (
                Stock.objects.filter(product_id=sku, available__gte=quantity),
                {"available": F("available") - quantity},
            ),
            sku=str, quantity=int,
        )
        taken = take(sku="MUG", quantity=2)  # rows updated, as QuerySet.update()

    `build` gets one value per name (of the given type) and returns what
    QuerySet.update would take: the queryset and the field values. It is called
    twice, with two sets of stand-in values, to learn the SQL and which of its
    parameters is which value; anything else in the statement (a setting read
    inside `build`) is fixed at that moment, so pass it as a value instead.
    Building and compiling the queryset was a third of checkout's CPU, paid on
    every call (bench/checkout.py; docs/architecture.md, Performance).
    """

    _STAND_INS = {int: (2_000_000_011, 2_000_000_017), str: ("\x1estand-in-a\x1e", "\x1estand-in-b\x1e")}

    def __init__(self, build, **types: type) -> None:
        if not set(types.values()) <= set(self._STAND_INS):
            raise TypeError("values must be int or str")
        self._build, self._types = build, types
        self._compiled: tuple[str, str, list] | None = None

    def _stand_ins(self, which: int) -> dict:
        # distinct per name: the type's stand-in, shifted by the name's position
        return {
            name: (self._STAND_INS[kind][which] + n if kind is int else f"{self._STAND_INS[kind][which]}{n}")
            for n, (name, kind) in enumerate(self._types.items())
        }

    def _sql(self, values: dict) -> tuple[str, str, list]:
        queryset, updates = self._build(**values)
        if queryset.query.is_sliced:
            raise TypeError("Cannot update a query once a slice has been taken.")
        query = queryset.query.chain(sql.UpdateQuery)
        query.add_update_values(updates)
        text, params = query.get_compiler(queryset.db).as_sql()
        return queryset.db, text, list(params)

    def _compile(self) -> tuple[str, str, list]:
        first, second = self._stand_ins(0), self._stand_ins(1)
        alias, text, params = self._sql(first)
        _, text_again, params_again = self._sql(second)
        names = {value: name for name, value in first.items()}
        slots: list = []
        for a, b in zip(params, params_again, strict=True):
            if isinstance(a, int | str) and a in names and second[names[a]] == b:
                slots.append(_Slot(names[a]))
            elif a == b:
                slots.append(a)
            else:
                raise ValueError(f"a parameter of {text!r} depends on the values in a way no slot describes")
        if text != text_again:
            raise ValueError(f"the SQL of {text!r} depends on the values")
        self._compiled = (alias, text, slots)
        return self._compiled

    def __call__(self, **values) -> int:
        alias, text, slots = self._compiled or self._compile()
        params = [values[slot.name] if type(slot) is _Slot else slot for slot in slots]
        try:
            return execute_kept(text, params, alias).rowcount
        except Exception as exc:  # as transaction.mark_for_rollback_on_error(alias), without its look-ups
            db = connections[alias]
            if db.in_atomic_block:
                db.needs_rollback, db.rollback_exc = True, exc
            raise


@dataclass(frozen=True)
class _Slot:
    name: str


class AnyOf(models.Lookup):
    """`field__any=values`: `field = ANY(%s)` with the values as one array
    parameter, where `__in` binds one parameter each. For the large batches
    (the queue writer's 500 ids, customers and keys): preparing 500 values one
    by one and parsing a statement with 500 placeholders was a third of the
    writer's CPU (cProfile of write_batch)."""

    lookup_name = "any"
    prepare_rhs = False

    def get_prep_lookup(self):
        return [self.lhs.output_field.get_prep_value(value) for value in self.rhs]

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", [*lhs_params, list(self.rhs)]


models.Field.register_lookup(AnyOf)
models.ForeignObject.register_lookup(AnyOf)  # relations look their lookups up from ForeignObject down
