"""Schema migrations: Alembic configured in code, legacy adoption, status and drift checks.

A store is in one of these states (``status``):

``empty``       no tables yet (a new file): ``upgrade`` creates everything.
``legacy``      a ``schema_version`` table and no ``alembic_version``: written by the agent's own
                store. ``upgrade`` stamps it at the revision equal to its number (12…31 are
                stamped at v11 and reconciled column by column) and upgrades it, all in one
                transaction.
``behind``      an Alembic revision older than head.
``up-to-date``  at head.
``ahead``       an Alembic revision this code does not know (a newer hermes_store wrote it).
``unknown``     has tables but neither marker: refused, never "initialised" over.

``schema_version`` is kept for the agents that share the file. The legacy revisions keep it in
step up to 11, exactly as the agent's store did; an upgrade to head then stamps it
``AGENT_SCHEMA_VERSION`` (21) unless it is higher already, so an agent of the v21 line opening
the file finds nothing to migrate (docs/mixed-fleets.md). Nothing of ours reads it except to
adopt; ``alembic_version`` is the truth.

After the revisions, :func:`reconcile` adds what the models declare and the file lacks (tables,
columns, indexes), whatever the stamps say: a legacy file stamped 11 without ``state_meta`` is
stamped at revision 0011 and would otherwise stay without it (docs/v21.md#open-time-behaviour).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.errors import SchemaMismatchError
from hermes_store.paths import resolve_db_path

log = logging.getLogger(__name__)

# schema_version N -> the revision that reproduces layout N.
LEGACY_REVISIONS: dict[int, str] = {
    1: "0001_v1_initial",
    2: "0002_v2_finish_reason",
    3: "0002_v2_finish_reason",  # never a resting state; 0004 adds the title column if missing
    4: "0004_v4_titles",
    5: "0005_v5_billing",
    6: "0006_v6_reasoning",
    7: "0007_v7_reasoning_content",
    8: "0008_v8_api_calls_state_meta",
    9: "0009_v9_codex_items",
    10: "0010_v10_trigram",
    11: "0011_v11_inline_fts",
}
# Newer upstream releases (12…31) are adopted at v11: their extra tables and columns are kept,
# and our later revisions add only what is missing.
LEGACY_MAX_KNOWN = 11
# The legacy version whose revision (0008) creates state_meta.
STATE_META_SINCE = 8
# The number the agent's v21 line writes; below it, that agent re-runs its own migrations.
AGENT_SCHEMA_VERSION = 21
# Modelled tables that only an explicit opt-in creates (the agent's Telegram topic mode: an older
# bot must keep running on an upgraded store), so neither an open nor reconcile adds them.
OPT_IN_TABLES = frozenset({"telegram_dm_topic_mode", "telegram_dm_topic_bindings"})

FTS_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config")
# Only these names are treated as ours: a user table called "app_config" is never touched.
KNOWN_FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk",
                    "messages_fts_trigram_old", "messages_fts_old",
                    "messages_fts_cjk_old")
UPGRADE_BUDGET_S = 60.0
_ALEMBIC_RUN = threading.Lock()


def script_location() -> str:
    """The migrations folder: inside the installed package, else the repository's."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise RuntimeError("hermes_store's migrations folder is missing from this installation")


def make_config(db: str | os.PathLike[str] | None = None, *, connection: Connection | None = None,
                location: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", location or script_location())
    if db is not None:
        cfg.set_main_option("hermes.db", str(db))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def db_path_from_config(cfg: Config) -> Path:
    """``-x db=PATH`` on the alembic command line, else ``hermes.db``, else the default store."""
    x_args = {}
    if cfg.cmd_opts is not None and getattr(cfg.cmd_opts, "x", None):
        for item in cfg.cmd_opts.x:
            key, _, value = item.partition("=")
            x_args[key.strip()] = value.strip()
    return resolve_db_path(x_args.get("db") or cfg.get_main_option("hermes.db"))


def head_revision(location: str | None = None) -> str:
    head = ScriptDirectory(location or script_location()).get_current_head()
    assert head is not None
    return head


# --------------------------------------------------------------------------- status


@dataclass
class SchemaStatus:
    state: str
    current: str | None
    head: str
    pending: list[str] = field(default_factory=list)
    legacy_version: int | None = None

    @property
    def at_head(self) -> bool:
        return self.state == "up-to-date"

    def describe(self) -> str:
        if self.state == "behind":
            return f"behind ({len(self.pending)} pending: {', '.join(self.pending)})"
        if self.state == "legacy":
            if self.legacy_version is None:
                return "legacy (Hermes schema_version empty)"
            return f"legacy (Hermes schema_version={self.legacy_version})"
        if self.state == "ahead":
            return f"ahead (unknown revision {self.current})"
        return self.state


def _tables(conn: Connection) -> set[str]:
    return {r[0] for r in conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def status_of(conn: Connection, location: str | None = None) -> SchemaStatus:
    location = location or script_location()
    script = ScriptDirectory(location)
    head = head_revision(location)
    tables = _tables(conn)
    if "alembic_version" in tables:
        current = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        if current == head:
            return SchemaStatus("up-to-date", current, head)
        try:
            pending = [s.revision for s in script.iterate_revisions(head, current)]
        except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
            return SchemaStatus("ahead", current, head)
        return SchemaStatus("behind", current, head, list(reversed(pending)))
    if "schema_version" in tables:
        version = conn.exec_driver_sql("SELECT MAX(version) FROM schema_version").scalar()
        return SchemaStatus("legacy", None, head, legacy_version=version)
    if tables - {"sqlite_sequence"}:
        return SchemaStatus("unknown", None, head)
    return SchemaStatus("empty", None, head)


def status(target: str | os.PathLike[str] | Engine | None = None) -> SchemaStatus:
    """Where the store stands; reads only (a missing file is reported, not created)."""
    if isinstance(target, Engine):
        engine = target
    else:
        path = resolve_db_path(target)
        if not path.exists():
            return SchemaStatus("missing", None, head_revision())
        engine = open_engine(path, readonly=True)
    with reading(engine) as conn:
        return status_of(conn)


def current(target: str | os.PathLike[str] | Engine | None = None) -> str | None:
    return status(target).current


# --------------------------------------------------------------------------- upgrade


def refuse(st: SchemaStatus) -> None:
    """Raise for a store no upgrade may touch (a newer code's revision, or not ours)."""
    if st.state == "ahead":
        raise SchemaMismatchError(
            f"the store is at revision {st.current}, which this hermes_store does not know "
            "(a newer version wrote it); upgrade hermes_store instead",
            state="ahead", current=st.current, head=st.head)
    if st.state == "unknown":
        raise SchemaMismatchError(
            "the file holds tables but no schema_version or alembic_version: it is not a "
            "Hermes store this code can adopt; nothing was changed",
            state="unknown", head=st.head)


def upgrade(target: str | os.PathLike[str] | Engine | None = None, revision: str = "head", *,
            location: str | None = None) -> SchemaStatus:
    """Bring the store to ``revision`` (head by default) in one write transaction.

    Creates the file when missing, adopts legacy stores, and does nothing at all (no write lock,
    no stamp) when the store is already there. Returns the status afterwards.
    """
    engine = target if isinstance(target, Engine) else open_engine(resolve_db_path(target))
    with reading(engine) as conn:
        before = status_of(conn, location)
    refuse(before)
    if before.state == "up-to-date" and revision == "head":
        return before

    def unit(conn: Connection) -> None:
        cfg = make_config(connection=conn, location=location)
        cfg.attributes["hermes_adopt"] = True
        command.upgrade(cfg, revision)

    # Alembic's ``op`` and ``context`` are process-wide proxies: two upgrades running at once in
    # one process (two stores opened by two threads) would run each other's statements.
    with _ALEMBIC_RUN:
        run_write(engine, unit, budget=UPGRADE_BUDGET_S, what="upgrade")
    with reading(engine) as conn:
        return status_of(conn, location)


def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Autogenerate reflects only the modelled tables: FTS5 tables, their shadow tables, views,
    ``schema_version`` and tables of newer upstream releases are not ours to diff (or drop)."""
    if type_ == "table":
        from hermes_store.db.models import Base

        return name in Base.metadata.tables
    return True


def include_object(obj: Any, name: str | None, type_: str, reflected: bool,
                   compare_to: Any) -> bool:
    # Columns and indexes a newer upstream release added are carried through untouched, so
    # their presence is not drift.
    if reflected and compare_to is None and type_ in (
            "column", "index", "unique_constraint", "foreign_key_constraint"):
        return False
    # SQLite's reflection drops a column-level ON DELETE (the v21 agent writes its cascades that
    # way), so a model key with ON DELETE would never match what the file really has.
    return not (type_ == "foreign_key_constraint" and not reflected
                and getattr(obj, "ondelete", None) is not None)


def check(target: str | os.PathLike[str] | Engine | None = None) -> list[Any]:
    """Autogenerate differences between the models and the store (``[]`` means none), then
    ``("foreign_index_trigger", name)`` for each trigger of another program writing to our
    search indexes at head (an agent of another release adds them; docs/mixed-fleets.md)."""
    from alembic.autogenerate import compare_metadata

    from hermes_store.db import derived
    from hermes_store.db.models import Base

    engine = target if isinstance(target, Engine) else open_engine(
        resolve_db_path(target), readonly=True)
    with reading(engine) as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_name": include_name, "include_object": include_object,
            "compare_type": True, "target_metadata": Base.metadata})
        found: list[Any] = list(compare_metadata(ctx, Base.metadata))
        if status_of(conn).at_head:
            found += [("foreign_index_trigger", name)
                      for name in derived.foreign_index_triggers(conn)]
        return found


def prepare_for_upgrade(conn: Connection, context: MigrationContext,
                        script: ScriptDirectory) -> None:
    """Called by env.py inside the upgrade transaction, before any revision runs."""
    drop_orphan_fts_shadows(conn)
    tables = _tables(conn)
    if "alembic_version" in tables or "schema_version" not in tables:
        return
    version = conn.exec_driver_sql("SELECT MAX(version) FROM schema_version").scalar()
    if version is None:
        # An empty schema_version counts as current (the agent's SCHEMA_SQL leaves it empty):
        # adopted like a newer release, reconciled column by column.
        version = AGENT_SCHEMA_VERSION
    if not isinstance(version, int) or version < 1:
        raise SchemaMismatchError(f"schema_version holds {version!r}, not a Hermes version",
                                  state="unknown")
    context.stamp(script, LEGACY_REVISIONS[min(version, LEGACY_MAX_KNOWN)])
    if version >= STATE_META_SINCE:
        # Stamped past the revision that creates it, yet some files lack it; the revisions
        # after the stamp read it (docs/v21.md#open-time-behaviour).
        conn.exec_driver_sql(
            "CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT)")


def drop_orphan_fts_shadows(conn: Connection) -> list[str]:
    """Drop FTS5 shadow tables whose virtual table is gone; return their names.

    An interrupted DROP (or ``.recover``) can leave ``X_data``/``X_idx``/… behind; every later
    ``CREATE VIRTUAL TABLE X`` then fails with "already exists". Only our known index names are
    considered, and a shadow is dropped only when ``X`` itself is absent.
    """
    names = {r[0]: (r[1] or "") for r in conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
    dropped = []
    for base in KNOWN_FTS_TABLES:
        if base in names:
            continue
        for suffix in FTS_SHADOW_SUFFIXES:
            shadow = base + suffix
            if shadow in names:
                conn.exec_driver_sql(f'DROP TABLE "{shadow}"')
                dropped.append(shadow)
    return dropped


# --------------------------------------------------------------------------- reconcile


def _modelled_tables() -> list[sa.Table]:
    from hermes_store.db.models import Base

    return [t for t in Base.metadata.sorted_tables if t.name not in OPT_IN_TABLES]


def _column_ddl(conn: Connection, column: sa.Column[Any]) -> str | None:
    """``name TYPE [NOT NULL] [DEFAULT x]`` for ``ALTER TABLE ADD COLUMN``; None when the column
    cannot be added to a table with rows (NOT NULL without a default)."""
    default = column.server_default
    default_sql = None
    if isinstance(default, sa.DefaultClause):
        arg = default.arg
        default_sql = arg.text if isinstance(arg, sa.TextClause) else repr(arg)
    if not column.nullable and default_sql is None:
        return None
    parts = [conn.dialect.identifier_preparer.quote(column.name),
             column.type.compile(dialect=conn.dialect)]
    if not column.nullable:
        parts.append("NOT NULL")
    if default_sql is not None:
        parts.append(f"DEFAULT {default_sql}")
    return " ".join(parts)


def missing_schema(conn: Connection) -> list[str]:
    """What the models declare and the store lacks: ``table``, ``table.column``, ``index``.

    Reads only. Views and tables of newer upstream releases are not compared (they are kept).
    """
    inspector = sa.inspect(conn)
    present = set(inspector.get_table_names())
    missing: list[str] = []
    for table in _modelled_tables():
        if table.name not in present:
            missing.append(table.name)
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        missing += [f"{table.name}.{c.name}" for c in table.columns if c.name not in have]
        indexes = {i["name"] for i in inspector.get_indexes(table.name)}
        missing += [str(i.name) for i in table.indexes if i.name not in indexes]
    return missing


def reconcile(conn: Connection, *, indexes: bool = True) -> list[str]:
    """Add, in the caller's transaction, every table, column and index of the models the store
    lacks (with its type, ``NOT NULL`` and ``DEFAULT``); returns what was added.

    Nothing that exists is altered. An index the data cannot satisfy (a unique title index over
    duplicate titles) is logged and left out rather than failing the open; so is a column that
    cannot be added to a table with rows.
    """
    wanted = set(missing_schema(conn))
    if not indexes:
        wanted = {name for name in wanted if "." in name or name in
                  {t.name for t in _modelled_tables()}}
    if not wanted:
        return []
    done: list[str] = []
    tables = _modelled_tables()
    for table in tables:
        if table.name in wanted:
            table.create(conn, checkfirst=True)
            done.append(table.name)
            continue
        for column in table.columns:
            if f"{table.name}.{column.name}" not in wanted:
                continue
            ddl = _column_ddl(conn, column)
            if ddl is None:
                log.warning("%s.%s is missing and cannot be added (NOT NULL without a "
                            "default)", table.name, column.name)
                continue
            conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {ddl}"))
            done.append(f"{table.name}.{column.name}")
    for table in tables:
        for index in table.indexes:
            if index.name not in wanted or table.name in wanted:
                continue
            try:
                with conn.begin_nested():
                    index.create(conn)
            except sa.exc.DBAPIError as err:
                log.warning("index %s not created: %s", index.name, err.orig)
                continue
            done.append(str(index.name))
    return done


# --------------------------------------------------------------------------- the agent's stamp

_schema_version = sa.table("schema_version", sa.column("version", sa.Integer))


def agent_schema_version(conn: Connection) -> int | None:
    """The agent's ``schema_version``; None when the table is missing or empty."""
    if "schema_version" not in sa.inspect(conn).get_table_names():
        return None
    value = conn.execute(sa.select(sa.func.max(_schema_version.c.version))).scalar()
    return int(value) if value is not None else None


def stamp_agent_version(conn: Connection) -> bool:
    """Leave ``schema_version`` at ``AGENT_SCHEMA_VERSION`` or above; True when it was written."""
    if "schema_version" not in sa.inspect(conn).get_table_names():
        conn.execute(sa.text("CREATE TABLE schema_version (version INTEGER NOT NULL)"))
    current = agent_schema_version(conn)
    if current is None:
        conn.execute(sa.insert(_schema_version).values(version=AGENT_SCHEMA_VERSION))
        return True
    if current < AGENT_SCHEMA_VERSION:
        conn.execute(sa.update(_schema_version).values(version=AGENT_SCHEMA_VERSION))
        return True
    return False
