"""The docs keep up with the code: every management command of the shop is in
docs/operations.md's command table with each of its options (and the table
lists no command that does not exist), and every setting config/settings.py
reads from the environment is in the README's settings table (and every
variable that table names is read somewhere in the project)."""

import re
from pathlib import Path

from django.conf import settings
from django.core.management import get_commands, load_command_class

ROOT = Path(settings.BASE_DIR)
SHOP_APPS = {"config", "core", "shop", "inventory", "cart", "orders", "outbox"}
DJANGO_OPTIONS = {
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
    "--help",
}
ENV_READ = re.compile(r"\benv(?:_int|_bool|_list)?\(\s*\"([A-Z][A-Z0-9_]+)\"")


def table_rows(text: str, header: str) -> list[str]:
    """The rows of the Markdown table under `header` (its first line), up to the first line that is not a row."""
    lines = text.splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def documented_commands() -> dict[str, str]:
    rows = table_rows((ROOT / "docs" / "operations.md").read_text(), "| command | app | what |")
    return {re.match(r"\| `([a-z_]+)", row).group(1): row for row in rows}


def shop_commands() -> dict[str, str]:
    return {name: app for name, app in get_commands().items() if app in SHOP_APPS}


def test_every_command_is_documented_with_its_options_and_nothing_else_is():
    documented, commands = documented_commands(), shop_commands()
    assert sorted(set(commands) - set(documented)) == [], "commands missing from docs/operations.md"
    assert sorted(set(documented) - set(commands)) == [], "docs/operations.md lists commands that do not exist"
    missing = {}
    for name, app in commands.items():
        parser = load_command_class(app, name).create_parser("manage.py", name)
        options = {option for action in parser._actions for option in action.option_strings if option.startswith("--")}
        if undocumented := sorted(option for option in options - DJANGO_OPTIONS if option not in documented[name]):
            missing[name] = undocumented
    assert missing == {}, "options missing from docs/operations.md"


def test_every_setting_read_from_the_environment_is_in_the_readme_and_the_reverse():
    read = set(ENV_READ.findall((ROOT / "config" / "settings.py").read_text()))
    rows = table_rows((ROOT / "README.md").read_text(), "| variable | default | meaning |")
    documented = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
    assert sorted(read - documented) == [], "settings missing from the README's table"
    sources = "\n".join(
        path.read_text(errors="replace")
        for pattern in ("**/*.py", "Makefile", "Procfile*", "scripts/*")
        for path in ROOT.glob(pattern)
        if ".venv" not in path.parts and path.is_file()
    )
    unread = sorted(name for name in documented - read if not re.search(rf"\b{name}\b", sources))
    assert unread == [], "the README documents variables nothing reads"
