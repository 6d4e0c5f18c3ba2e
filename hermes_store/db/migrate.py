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

``schema_version`` is kept. The legacy revisions keep it in step up to 11, exactly as the agent's
store did, and after that it is frozen (a store adopted from a newer upstream release keeps its
own number). Nothing of ours reads it except to adopt; ``alembic_version`` is the truth. Keeping
it loses nothing, and tools that print it still work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from hermes_store.db import catalog
from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.errors import SchemaMismatchError
from hermes_store.paths import resolve_db_path

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

UPGRADE_BUDGET_S = 60.0


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
            return f"legacy (Hermes schema_version={self.legacy_version})"
        if self.state == "ahead":
            return f"ahead (unknown revision {self.current})"
        return self.state


def status_of(conn: Connection, location: str | None = None) -> SchemaStatus:
    location = location or script_location()
    script = ScriptDirectory(location)
    head = head_revision(location)
    tables = catalog.relations(conn)
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


def _refuse(st: SchemaStatus) -> None:
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
    _refuse(before)
    if before.state == "up-to-date" and revision == "head":
        return before

    def unit(conn: Connection) -> None:
        cfg = make_config(connection=conn, location=location)
        cfg.attributes["hermes_adopt"] = True
        command.upgrade(cfg, revision)

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
    return not (reflected and compare_to is None
                and type_ in ("column", "index", "unique_constraint", "foreign_key_constraint"))


def check(target: str | os.PathLike[str] | Engine | None = None) -> list[Any]:
    """Autogenerate differences between the models and the store (``[]`` means none)."""
    from alembic.autogenerate import compare_metadata

    from hermes_store.db.models import Base

    engine = target if isinstance(target, Engine) else open_engine(
        resolve_db_path(target), readonly=True)
    with reading(engine) as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_name": include_name, "include_object": include_object,
            "compare_type": True, "target_metadata": Base.metadata})
        return list(compare_metadata(ctx, Base.metadata))


def prepare_for_upgrade(conn: Connection, context: MigrationContext,
                        script: ScriptDirectory) -> None:
    """Called by env.py inside the upgrade transaction, before any revision runs."""
    drop_orphan_fts_shadows(conn)
    tables = catalog.relations(conn)
    if "alembic_version" in tables or "schema_version" not in tables:
        return
    version = conn.exec_driver_sql("SELECT MAX(version) FROM schema_version").scalar()
    if not isinstance(version, int) or version < 1:
        raise SchemaMismatchError(f"schema_version holds {version!r}, not a Hermes version",
                                  state="unknown")
    context.stamp(script, LEGACY_REVISIONS[min(version, LEGACY_MAX_KNOWN)])


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
