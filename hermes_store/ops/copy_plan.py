"""The plan of a ``copy`` (``ops.copy``): which tables and columns go across, and the target made
ready to take them.

The modelled tables go parents first (foreign keys), then whatever a newer agent release added,
by name. A table the target lacks is created there; a column it lacks is added, when the source
type maps to one the target holds faithfully (integer, real, text, blob). A column SQLite
declared without a type (or a server type with no SQLite meaning) has no faithful mapping: it is
named in the plan as not copied, as is a virtual table (its module may not exist on the target).
Derived data (search indexes, tsvector columns, FTS5 shadow tables) is never planned: the target
derives its own.

Every question about what exists is asked through ``db.catalog``; the only SQL text here is the
``ALTER TABLE … ADD COLUMN`` of a validated, quoted name and a type compiled from the fixed map.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    Table,
)
from sqlalchemy import types as satypes

from hermes_store.db import catalog, migrate, topics
from hermes_store.db.dialect import FLOAT, INTEGER, TEXT, dialect_name
from hermes_store.db.engine import reading, run_write
from hermes_store.db.models import Base
from hermes_store.errors import UsageError

# Bookkeeping: recreated by the target's own schema, never copied.
_SKIP_TABLES = {"alembic_version", "schema_version", "sqlite_sequence", "sqlite_stat1",
                "sqlite_stat4"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BLOB = satypes.LargeBinary()
PLAN_BUDGET_S = 60.0


@dataclass
class TablePlan:
    """One table: the columns both sides share, its key, and its Core tables on each side."""

    name: str
    src: Table
    dst: Table
    columns: list[str]
    key: list[str]


@dataclass
class CopyPlan:
    tables: list[TablePlan] = field(default_factory=list)
    created_tables: list[str] = field(default_factory=list)
    added_columns: list[str] = field(default_factory=list)
    not_copied: list[str] = field(default_factory=list)


def copyable(conn: Connection) -> list[str]:
    """The tables holding data of the store (derived, bookkeeping and virtual ones left out)."""
    names = catalog.tables(conn) - _SKIP_TABLES - _virtual(conn)[0]
    return sorted(n for n in names if not catalog.is_derived_name(n)
                  and not n.startswith("sqlite_"))


def _virtual(conn: Connection) -> tuple[set[str], list[str]]:
    """Virtual tables with their FTS shadow tables, and the virtual tables that are not ours
    (SQLite only)."""
    if dialect_name(conn) != "sqlite":
        return set(), []
    definitions = catalog.table_definitions(conn)
    owned = catalog.fts_owned(definitions)
    foreign = sorted(n for n in owned if not catalog.is_derived_name(n)
                     and definitions[n].lstrip().upper().startswith("CREATE VIRTUAL"))
    return owned, foreign


def _ordered(names: set[str]) -> list[str]:
    """Modelled tables parents first (foreign keys), then the unknown ones by name."""
    known = [t.name for t in Base.metadata.sorted_tables if t.name in names]
    return known + sorted(names - set(known))


def mapped_type(kind: Any) -> Any | None:
    """A column type for the target, or None when there is no faithful one."""
    try:
        affinity = kind._type_affinity
    except Exception:  # noqa: BLE001 - an unknown reflected type
        return None
    if affinity is None or isinstance(kind, satypes.NullType):
        return None
    if issubclass(affinity, satypes.Integer):
        return INTEGER
    if issubclass(affinity, (satypes.Float, satypes.Numeric)):
        return FLOAT
    if issubclass(affinity, satypes.String):
        return TEXT
    if issubclass(affinity, satypes._Binary):
        return _BLOB
    return None


def quoted(conn: Connection, name: str) -> str:
    """A table or column name for DDL, quoted; names outside ``[A-Za-z_][A-Za-z0-9_]*`` are
    refused rather than trusted."""
    if not _IDENT.match(name):
        raise UsageError(f"the source has a table or column named {name!r}, which copy does "
                         "not put into SQL text; rename it first")
    return str(conn.dialect.identifier_preparer.quote(name))


def _prepare(dst: Connection, name: str, src_cols: dict[str, dict[str, Any]],
             src_key: list[str], plan: CopyPlan) -> None:
    """Make ``name`` exist on the target with every source column that maps."""
    if name in migrate.OPT_IN_TABLES and not catalog.has_table(dst, name):
        topics.create(dst)  # with the agent's own DDL (keys, cascade, indexes)
        plan.created_tables.append(name)
    if not catalog.has_table(dst, name):
        cols = []
        for col, info in src_cols.items():
            kind = mapped_type(info["type"])
            if kind is not None:
                quoted(dst, col)
                cols.append(Column(col, kind, nullable=col not in src_key))
        key = [k for k in src_key if any(c.name == k for c in cols)]
        extra = [PrimaryKeyConstraint(*key)] if key and key == src_key else []
        quoted(dst, name)
        Table(name, MetaData(), *cols, *extra).create(dst)
        plan.created_tables.append(name)
        return
    have = catalog.column_details(dst, name)
    for col, info in src_cols.items():
        kind = mapped_type(info["type"])
        if col in have or kind is None:
            continue
        ddl = kind.compile(dialect=dst.dialect)
        dst.exec_driver_sql(f"ALTER TABLE {quoted(dst, name)} ADD COLUMN {quoted(dst, col)} {ddl}")
        plan.added_columns.append(f"{name}.{col}")


def make_plan(src_engine: Engine, dst_engine: Engine, *, budget: float = PLAN_BUDGET_S
              ) -> CopyPlan:
    """Read the source's shape, make the target ready (one write transaction), and plan."""
    plan = CopyPlan()
    with reading(src_engine) as src:
        names = _ordered(set(copyable(src)))
        plan.not_copied += [f"{v} (a virtual table)" for v in _virtual(src)[1]]
        shapes = {}
        for name in names:
            cols = {c: i for c, i in catalog.column_details(src, name).items()
                    if not i.get("computed") and not catalog.is_derived_name(c)}
            shapes[name] = (cols, catalog.primary_key(src, name))

    def prepare(dst: Connection) -> None:
        for name in names:
            _prepare(dst, name, *shapes[name], plan)

    run_write(dst_engine, prepare, what="copy", budget=budget)
    with reading(src_engine) as src, reading(dst_engine) as dst:
        for name in names:
            cols, key = shapes[name]
            have = {c for c, i in catalog.column_details(dst, name).items()
                    if not i.get("computed")}
            shared = [c for c in cols if c in have]
            plan.not_copied += [f"{name}.{c} ({cols[c]['type']!r}: no faithful type on the "
                                f"{dst.dialect.name} target)" for c in cols if c not in have]
            if not shared:
                continue
            plan.tables.append(TablePlan(name, catalog.reflect(src, name),
                                         catalog.reflect(dst, name), shared,
                                         [k for k in key if k in shared]))
    return plan
