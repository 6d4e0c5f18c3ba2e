"""The package's rooms and the one direction of its arrows (docs/architecture.md).

content/errors/paths/version  <-  db  <-  repo  <-  {search, ops, transfer}  <-  {facade, cli}
                                                                              <-  compat

``compat`` is a face over the facade: the agent's module name for ``SessionDB`` and the rest.

Every import counts, including those inside functions: an import deferred to call time is still
an arrow, and a cycle hidden that way is still a cycle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hermes_store"
NAME = "hermes_store"
MAX_LINES = 600

BOTTOM = {"content", "errors", "paths", "version"}
GROUP_LAYER = {"db": 1, "repo": 2, "search": 3, "ops": 3, "transfer": 3,
               "facade": 4, "cli": 4, "compat": 5}
# Old top-level import paths kept for one release; they are faces, not rooms.
ALIASES = {"engine", "migrate", "maintenance", "lineage"}
# Where the schema catalog (what exists in the database) may be read: its tables, views and the
# pragmas that describe a table. Named anywhere else, even in a comment, they are read there.
CATALOG_NAMES = re.compile(r"\b(sqlite_master|sqlite_schema|sqlite_temp_master|sqlite_temp_schema|"
                           r"pg_catalog|information_schema|pg_class|pg_namespace|pg_index|"
                           r"pg_indexes|pg_attribute|pg_depend|pg_tables|pg_views|table_info|"
                           r"table_xinfo|table_list|index_list|index_info|index_xinfo|"
                           r"foreign_key_list)\b")
SQL = re.compile(r"\b(SELECT\b.+\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|"
                 r"DELETE\s+FROM|CREATE\s+(TABLE|INDEX|TRIGGER|VIEW)|PRAGMA\s+\w+)\b",
                 re.IGNORECASE | re.DOTALL)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.relative_to(PACKAGE).parts:
            continue
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([NAME, *parts])] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import of the package in ``module``, at any depth."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == NAME:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != NAME:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


def _room(module: str) -> tuple[str, int]:
    """(room, layer): the face is layer 5 so that nothing may import it."""
    parts = module.split(".")[1:]
    if not parts or (len(parts) == 1 and parts[0] in ALIASES):
        return "face", 5
    head = parts[0]
    if head in BOTTOM:
        return head, 0
    return head, GROUP_LAYER[head]


def _arrows() -> list[tuple[str, str, int]]:
    return [(module, target, line) for module, path in MODULES.items()
            for target, line in _imports(module, path) if target != module]


def test_every_module_belongs_to_a_known_room() -> None:
    unknown = [m for m in MODULES if m.split(".")[1:2]
               and m.split(".")[1] not in BOTTOM | set(GROUP_LAYER) | ALIASES]
    assert unknown == []


def test_imports_run_one_way_down_the_layers() -> None:
    wrong = []
    for source, target, line in _arrows():
        (room, layer), (target_room, target_layer) = _room(source), _room(target)
        if room == "face":
            continue
        if target_room == room or target_layer < layer or (layer == 0 and target_layer == 0):
            continue
        wrong.append(f"{MODULES[source].relative_to(PACKAGE)}:{line} imports {target}")
    assert wrong == []


def test_nothing_inside_the_package_imports_its_face() -> None:
    wrong = [f"{MODULES[s].relative_to(PACKAGE)}:{line} imports {t}"
             for s, t, line in _arrows() if _room(s)[0] != "face" and _room(t)[0] == "face"]
    assert wrong == []


SEARCH_DIALECTS = ("hermes_store.search.sqlite", "hermes_store.search.postgres")


def test_search_dialects_stand_side_by_side() -> None:
    """Each dialect builds on the neutral ``search.shape`` alone: neither imports the other,
    and the shape imports neither (so a SQLite search never loads PostgreSQL's module)."""
    wrong = [f"{MODULES[s].relative_to(PACKAGE)}:{line} imports {t}" for s, t, line in _arrows()
             if s in (*SEARCH_DIALECTS, "hermes_store.search.shape")
             and t in SEARCH_DIALECTS and t != s]
    assert wrong == []


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for source, target, _ in _arrows():
        if target in graph:
            graph[source].add(target)
    # A package's __init__ is imported with each of its modules; only its own imports count.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def _cli_modules() -> dict[str, Path]:
    return {m: p for m, p in MODULES.items() if m.startswith(f"{NAME}.cli")}


def test_the_cli_imports_no_sqlalchemy() -> None:
    wrong = []
    for path in _cli_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{path.name}:{node.lineno}" for n in names if n.split(".")[0] == "sqlalchemy"]
    assert wrong == []


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield node.lineno, node.value


def test_the_cli_holds_no_sql() -> None:
    wrong = [f"{path.name}:{line}: {text[:60]!r}" for path in _cli_modules().values()
             for line, text in _strings(path) if SQL.search(text)]
    assert wrong == []


def _outside_the_catalog() -> Iterator[tuple[str, Path]]:
    return ((m, p) for m, p in MODULES.items() if m != f"{NAME}.db.catalog")


def test_only_the_catalog_names_the_schema_catalog() -> None:
    wrong = [f"{path.relative_to(PACKAGE)}:{number}" for _, path in _outside_the_catalog()
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if CATALOG_NAMES.search(line)]
    assert wrong == []


def _reflection(tree: ast.AST) -> Iterator[int]:
    """Lines that reflect through SQLAlchemy: its ``inspect`` (imported or as ``sa.inspect``) or
    a table loaded with ``autoload_with``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            if any(a.name == "inspect" for a in node.names):
                yield node.lineno
        elif (isinstance(node, ast.Attribute) and node.attr == "inspect"
              and isinstance(node.value, ast.Name) and node.value.id in {"sa", "sqlalchemy"}):
            yield node.lineno
        elif isinstance(node, ast.keyword) and node.arg == "autoload_with":
            yield node.value.lineno


def test_only_the_catalog_reflects_the_schema() -> None:
    wrong = [f"{path.relative_to(PACKAGE)}:{line}" for _, path in _outside_the_catalog()
             for line in _reflection(ast.parse(path.read_text()))]
    assert wrong == []


def test_the_reflection_check_sees_each_way_in() -> None:
    found = list(_reflection(ast.parse(
        "from sqlalchemy import inspect\n"
        "sa.inspect(conn)\n"
        "Table('t', MetaData(), autoload_with=conn)\n")))
    assert found == [1, 2, 3]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_600_lines(module: str) -> None:
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(PACKAGE)} has {lines} lines"
