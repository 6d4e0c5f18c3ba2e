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

A PostgreSQL store walks the same chain: the legacy SQLite revisions and the FTS5 ones do nothing
there, revision 0012 creates its tables, and later revisions branch on the dialect inside. There
is no legacy adoption on a server (the agent never wrote one).

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
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from hermes_store.db import catalog, distribution, postgres, schema_state
from hermes_store.db.engine import (
    READ_COMMITTED,
    fts5_available,
    is_server,
    lock_for_migration,
    open_engine,
    reading,
    run_write,
)
from hermes_store.db.revisions import script_location
from hermes_store.db.schema_state import SchemaStatus as SchemaStatus  # re-exported, as below
from hermes_store.db.schema_state import status as status
from hermes_store.db.schema_state import status_of as status_of
from hermes_store.errors import SchemaMismatchError, StoreNotFoundError
from hermes_store.paths import StoreLocation, resolve_location

Target = str | os.PathLike[str] | URL | StoreLocation | Engine | None

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

UPGRADE_BUDGET_S = 60.0
# Alembic's ``op`` and ``context`` are process-wide proxies: one upgrade per process at a time
# (two stores opened by two threads would run each other's statements; other processes take
# turns through the database's own lock).
_ALEMBIC_LOCK = threading.Lock()
DERIVED_NAME_PREFIXES = catalog.DERIVED_NAME_PREFIXES
is_derived_name = catalog.is_derived_name


def make_config(db: str | os.PathLike[str] | StoreLocation | None = None, *,
                connection: Connection | None = None, location: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", location or script_location())
    if db is not None:
        # Kept as an object: a URL's escaped password ("%40") would trip ConfigParser.
        cfg.attributes["hermes_location"] = resolve_location(db)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def location_from_config(cfg: Config) -> StoreLocation:
    """``-x db=PATH|URL`` on the alembic command line, else the location :func:`make_config`
    was given, else ``$HERMES_STORE_URL``, else the default store."""
    x_args = {}
    if cfg.cmd_opts is not None and getattr(cfg.cmd_opts, "x", None):
        for item in cfg.cmd_opts.x:
            key, _, value = item.partition("=")
            x_args[key.strip()] = value.strip()
    return resolve_location(x_args.get("db") or cfg.attributes.get("hermes_location"))


def head_revision(location: str | None = None) -> str:
    head = ScriptDirectory(location or script_location()).get_current_head()
    assert head is not None
    return head


# --------------------------------------------------------------------------- status


# The status is read without Alembic (db.schema_state: every reading command asks first);
# its names stay importable from here.
current = schema_state.current


def pending_revisions(st: SchemaStatus, revision: str = "head", *,
                      location: str | None = None) -> list[str]:
    """The revisions an upgrade from ``st`` to ``revision`` would apply, oldest first.

    A legacy store counts from the revision its ``schema_version`` is adopted at. An id the
    migrations do not know is StoreNotFoundError (exit 3: a revision not found)."""
    script = ScriptDirectory(location or script_location())
    if revision != "head":
        try:
            script.get_revision(revision)
        except Exception as err:  # noqa: BLE001 - alembic raises several kinds for a bad id
            raise StoreNotFoundError(f"unknown schema revision {revision!r}") from err
    if st.state in ("behind", "up-to-date") and revision == "head":
        return list(st.pending)
    base = st.current
    if st.state == "legacy" and st.legacy_version is not None:
        base = LEGACY_REVISIONS[min(st.legacy_version, LEGACY_MAX_KNOWN)]
    upper = script.get_current_head() if revision == "head" else revision
    return [s.revision for s in script.iterate_revisions(upper, base or "base")][::-1]


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
            "the store holds tables but no schema_version or alembic_version: it is not a "
            "Hermes store this code can adopt; nothing was changed",
            state="unknown", head=st.head)


def upgrade(target: Target = None, revision: str = "head", *,
            location: str | None = None) -> SchemaStatus:
    """Bring the store to ``revision`` (head by default) in one write transaction.

    Creates the file when missing, adopts legacy stores, and does nothing at all (no write lock,
    no stamp) when the store is already there. Returns the status afterwards. On PostgreSQL the
    transaction is READ COMMITTED behind an advisory lock, so that a second process that waited
    for the first sees its tables instead of creating them again.
    """
    engine = target if isinstance(target, Engine) else open_engine(resolve_location(target))
    if is_server(engine):
        postgres.refuse_on_standby(engine, "upgrade")
    with reading(engine) as conn:
        before = status_of(conn, location)
        # A Citus database takes its distribution once the schema is at head (db/distribution).
        distribute = (revision == "head" and distribution.citus_installed(conn)
                      and not (before.state == "up-to-date" and distribution.is_distributed(conn)))
    refuse(before)
    if before.state == "up-to-date" and revision == "head" and not distribute:
        return before

    def unit(conn: Connection) -> None:
        cfg = make_config(connection=conn, location=location)
        cfg.attributes["hermes_adopt"] = True
        command.upgrade(cfg, revision)

    with _ALEMBIC_LOCK:
        if before.state != "up-to-date" or revision != "head":
            run_write(engine, unit, budget=UPGRADE_BUDGET_S, what="upgrade",
                      isolation=READ_COMMITTED)
        if distribute:
            run_write(engine, distribution.distribute, budget=UPGRADE_BUDGET_S,
                      what="upgrade (distribute)", isolation=READ_COMMITTED)
    with reading(engine) as conn:
        return status_of(conn, location)


def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Autogenerate reflects only the modelled tables: FTS5 tables, their shadow tables, views,
    ``schema_version`` and tables of newer upstream releases are not ours to diff (or drop);
    nor are the search columns and indexes (:data:`DERIVED_NAME_PREFIXES`)."""
    if type_ == "table":
        from hermes_store.db.models import Base

        return name in Base.metadata.tables
    return not is_derived_name(name)


def include_object(obj: Any, name: str | None, type_: str, reflected: bool,
                   compare_to: Any) -> bool:
    # Search columns and indexes (:data:`DERIVED_NAME_PREFIXES`) are never drift.
    if type_ != "table" and is_derived_name(name):
        return False
    # Columns and indexes a newer upstream release added are carried through untouched, so
    # their presence is not drift.
    if reflected and compare_to is None and type_ in (
            "column", "index", "unique_constraint", "foreign_key_constraint"):
        return False
    # The Telegram topic tables exist only once topic mode was switched on (no revision creates
    # them, so an older bot keeps running): absent is their normal state, present is compared.
    if type_ == "table" and not reflected and compare_to is None and name in OPT_IN_TABLES:
        return False
    # SQLite's reflection drops a column-level ON DELETE (the v21 agent writes its cascades that
    # way), so a model key with ON DELETE would never match what the file really has.
    return not (type_ == "foreign_key_constraint" and not reflected
                and getattr(obj, "ondelete", None) is not None)


def check(target: Target = None) -> list[Any]:
    """Autogenerate differences between the models and the store (``[]`` means none), then, on
    SQLite at head, ``("missing_search_object", name)`` for each view, index or trigger of ours
    that is gone (an agent's recovery path dropped triggers by name before revision 0022) and
    ``("foreign_index_trigger", name)`` for each trigger of another program writing to our
    search indexes (docs/mixed-fleets.md)."""
    from alembic.autogenerate import compare_metadata

    from hermes_store.db import derived, index_writers
    from hermes_store.db.models import Base

    engine = target if isinstance(target, Engine) else open_engine(
        resolve_location(target), readonly=True)
    with reading(engine) as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_name": include_name, "include_object": include_object,
            "compare_type": True, "target_metadata": Base.metadata})
        with catalog.reflecting():
            diffs = list(compare_metadata(ctx, Base.metadata))
        spread = distribution.distributed(conn)
        found: list[Any] = [d for d in diffs if not _dialect_fact(d, conn.dialect.name)
                            and not (spread and distribution.explains(d))]
        if conn.dialect.name == "sqlite" and status_of(conn).at_head:
            found += [("missing_search_object", name) for name in derived.missing_objects(conn)]
            found += [("foreign_index_trigger", name)
                      for name in index_writers.foreign_index_triggers(conn)]
        return found


def _dialect_fact(diff: Any, dialect: str) -> bool:
    """A difference the dialect imposes, not drift: the models let primary keys be NULL because
    SQLite's (non-INTEGER) ones can be, while a PostgreSQL primary key is NOT NULL by definition."""
    if dialect == "sqlite" or not isinstance(diff, list):
        return False
    from hermes_store.db.models import Base

    def forced(op: Any) -> bool:
        if not (isinstance(op, tuple) and op and op[0] == "modify_nullable"):
            return False
        table = Base.metadata.tables.get(op[2])
        return table is not None and op[3] in table.c and table.c[op[3]].primary_key
    return all(forced(op) for op in diff)


def prepare_for_upgrade(conn: Connection, context: MigrationContext,
                        script: ScriptDirectory, *, to_head: bool = False) -> None:
    """Called by env.py inside the upgrade transaction, before any revision runs.

    On the way to head, the columns the models declare are added to the tables the file has
    before any revision runs: a revision may index or read a column its number implies, and a
    file made by hand (or by a release that skipped one) can lack it whatever its stamp says."""
    lock_for_migration(conn)
    if conn.dialect.name != "sqlite":
        postgres.prepare_version_table(conn)
        return
    if not fts5_available():
        # Every path from below head builds FTS5 indexes; refuse before the first revision
        # rather than fail inside one. An open (``SessionDB``) still works, without search.
        raise SchemaMismatchError(
            "this SQLite has no FTS5 module, which the upgrade needs to build the search "
            "indexes; nothing was changed. SessionDB still opens the store, with search "
            "answering nothing, and the next open with FTS5 upgrades it "
            "(docs/v21.md#open-time-behaviour)", state="no-fts5")
    drop_orphan_fts_shadows(conn)
    tables = catalog.relations(conn)
    if to_head:
        added = reconcile(conn, indexes=False, tables=False)
        if added:
            log.info("before the revisions: added %s", ", ".join(added))
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
    considered (``catalog.orphan_fts_shadows``), and a shadow is dropped only when ``X`` itself
    is absent.
    """
    dropped = catalog.orphan_fts_shadows(catalog.tables(conn))
    for shadow in dropped:
        conn.exec_driver_sql(f'DROP TABLE "{shadow}"')
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
    tables = _modelled_tables()
    shapes = catalog.table_shapes(conn, [t.name for t in tables])
    missing: list[str] = []
    for table in tables:
        if table.name not in shapes:
            missing.append(table.name)
            continue
        have, indexes = shapes[table.name]
        missing += [f"{table.name}.{c.name}" for c in table.columns if c.name not in have]
        missing += [str(i.name) for i in table.indexes if i.name not in indexes]
    return missing


def reconcile(conn: Connection, *, indexes: bool = True, tables: bool = True) -> list[str]:
    """Add, in the caller's transaction, every table, column and index of the models the store
    lacks (with its type, ``NOT NULL`` and ``DEFAULT``); returns what was added. ``indexes`` and
    ``tables`` False leave those out (columns of the tables present are always added).

    Nothing that exists is altered. An index the data cannot satisfy (a unique title index over
    duplicate titles) is logged and left out rather than failing the open; so is a column that
    cannot be added to a table with rows.
    """
    wanted = set(missing_schema(conn))
    modelled = _modelled_tables()
    if not indexes:
        wanted = {name for name in wanted if "." in name or name in {t.name for t in modelled}}
    if not tables:
        wanted = {name for name in wanted if "." in name}
    if not wanted:
        return []
    done: list[str] = []
    for table in modelled:
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
    dropped = distribution.DROPPED_INDEXES if distribution.distributed(conn) else ()
    for table in modelled:
        for index in table.indexes:
            if index.name not in wanted or table.name in wanted or index.name in dropped:
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
    if not catalog.has_table(conn, "schema_version"):
        return None
    value = conn.execute(sa.select(sa.func.max(_schema_version.c.version))).scalar()
    return int(value) if value is not None else None


def stamp_agent_version(conn: Connection) -> bool:
    """Leave ``schema_version`` at ``AGENT_SCHEMA_VERSION`` or above; True when it was written."""
    if not catalog.has_table(conn, "schema_version"):
        conn.execute(sa.text("CREATE TABLE schema_version (version INTEGER NOT NULL)"))
    current = agent_schema_version(conn)
    if current is None:
        conn.execute(sa.insert(_schema_version).values(version=AGENT_SCHEMA_VERSION))
        return True
    if current < AGENT_SCHEMA_VERSION:
        conn.execute(sa.update(_schema_version).values(version=AGENT_SCHEMA_VERSION))
        return True
    return False
