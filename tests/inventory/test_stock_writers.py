"""Stock is written only by inventory.services: every reservation, return and
shipment goes through the conditional updates there (DESIGN, Inventory). This
walks the shop's own modules and fails on any other module that writes the
Stock table: a write method called on a chain that starts at `Stock`, a
`Stock(...)` instance, a CompiledUpdate of it (core/db.py), or SQL that names
the table."""

import ast
import re
from pathlib import Path

import pytest

from inventory.models import Stock

ROOT = Path(__file__).resolve().parents[2]
APPS = ["config", "orders", "cart", "inventory", "shop", "outbox", "core"]
ALLOWED = "inventory/services/"
WRITES = {
    "update",
    "bulk_update",
    "bulk_create",
    "create",
    "get_or_create",
    "update_or_create",
    "delete",
    "save",
    "select_for_update",
    "raw",
}  # and row locks: stock writers take them in one order
TABLE_SQL = re.compile(rf"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM|COPY)\s+\"?{Stock._meta.db_table}\b", re.IGNORECASE)


def _root_name(node: ast.AST) -> str | None:
    """`Stock` for Stock.objects.filter(...).update: the name a call chain starts from."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def stock_writes(source: str, models: frozenset[str] = frozenset({"Stock"})) -> list[str]:
    """Where `source` writes (or locks) the table of one of `models`: 'line N: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in models:
                found.append(f"line {node.lineno}: {func.id}(...)")
            elif (
                isinstance(func, ast.Name)
                and func.id == "for_update"
                and node.args
                and _root_name(node.args[0]) in models
            ):
                found.append(f"line {node.lineno}: for_update({_root_name(node.args[0])}...)")
            elif isinstance(func, ast.Attribute) and func.attr in WRITES and _root_name(func.value) in models:
                found.append(f"line {node.lineno}: {_root_name(func.value)}....{func.attr}()")
            elif _root_name(func) == "CompiledUpdate" and any(
                _root_name(inner) in models for inner in ast.walk(node) if isinstance(inner, ast.Attribute)
            ):
                found.append(f"line {node.lineno}: CompiledUpdate of one of {sorted(models)}")
        elif isinstance(node, ast.Attribute) and node.attr == "_meta" and _root_name(node.value) in models:
            found.append(f"line {node.lineno}: {_root_name(node.value)}._meta (its table in hand-written SQL)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TABLE_SQL.search(node.value):
            found.append(f"line {node.lineno}: SQL writing {Stock._meta.db_table}")
    return found


def _modules(allowed: str = ALLOWED):
    """(path, source) of every module of the shop outside `allowed` and the migrations."""
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(allowed) and "/migrations/" not in relative:
                yield relative, path.read_text()


def test_only_inventory_services_write_stock():
    offenders = [f"{module} {where}" for module, source in _modules() for where in stock_writes(source)]
    assert offenders == []


def test_the_walk_covers_the_shop():
    modules = dict(_modules())
    assert "orders/services/queue_writing.py" in modules and "inventory/admin/stock.py" in modules
    assert not any(module.startswith(ALLOWED) for module in modules)


@pytest.mark.parametrize(
    "source",
    [
        "Stock.objects.filter(product_id=sku, available__gte=1).update(available=F('available') - 1)",
        "Stock.objects.bulk_create([row])",
        "TAKE = CompiledUpdate(lambda sku: (Stock.objects.filter(product_id=sku), {'available': 0}), sku=str)",
        "Stock(product_id='A', available=3).save()",
        "rows = Stock.objects.select_for_update().filter(product_id__in=skus)",
        "rows = for_update(Stock.objects.filter(product_id__in=skus))",
        "cursor.execute(f'UPDATE {Stock._meta.db_table} SET available = 0')",
        "cursor.execute('update inventory set reserved = reserved + 1 where sku = %s', [sku])",
    ],
)
def test_the_check_catches_a_write(source):
    assert stock_writes(source)


@pytest.mark.parametrize(
    "source",
    [
        "Stock.objects.filter(product_id=sku).values_list('available', flat=True)",
        "reserve_stock(lines={'A': 1})",
        "Product.objects.filter(sku=sku).update(price=5)",
    ],
)
def test_reads_and_other_tables_pass(source):
    assert stock_writes(source) == []
