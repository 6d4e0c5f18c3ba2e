"""What opening a store does to it before the facade serves calls (docs/v21.md#open-time-behaviour).

``prepare`` runs on every read-write ``SessionDB`` open, reads first and writes only when there
is something to do (opening a current store writes nothing):

* a store behind head is upgraded (Alembic, one transaction); :func:`after_upgrade` runs inside
  that transaction from ``migrations/env.py``, so ``hermes-store upgrade`` does the same;
* whatever the stamps say, tables, columns and indexes the models declare are added
  (``migrate.reconcile``), NULL ``messages.active`` becomes 1, and ``schema_version`` is left at
  21 or above, so that agents sharing the file migrate nothing (docs/mixed-fleets.md);
* the agent's data steps (``repo.backfills``) run whenever the file's ``schema_version`` says
  they are missing (on adoption, or on a file at head whose stamp was lowered), and the stamp
  that records them is written in the same transaction;
* search objects of the head layout that are missing are put back and the indexes rebuilt
  (rows written while they were missing are indexed): the agent restored its triggers on every
  open too.

On PostgreSQL (the one branch is :func:`_on_server`) an open does the upgrade and the Core
steps only: the revisions, ``reconcile`` and the NULL ``active`` heal. The FTS5 probe, the
search objects and the trigger handling are SQLite objects, and ``schema_version`` and the
agent's data steps exist for the agent's file, which no agent shares on a server.

A SQLite without FTS5 still opens: the triggers writing to FTS5 tables are dropped (tables
kept) so that writes work, an upgrade that would build indexes is not attempted (the stamps stay
where they are) and search answers nothing; the next open with FTS5 restores and reindexes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, Engine

from hermes_store.db import derived, index_writers, migrate, postgres
from hermes_store.db import engine as engine_mod
from hermes_store.errors import SchemaMismatchError
from hermes_store.ops import storage
from hermes_store.paths import hermes_home
from hermes_store.repo import backfills

log = logging.getLogger(__name__)


@dataclass
class Needs:
    """What an open has to change; empty when the store is ready as it is."""

    missing: list[str] = field(default_factory=list)
    null_active: bool = False
    stamp: bool = False
    data_steps_from: int | None = None
    derived: list[str] = field(default_factory=list)
    fts5_writers: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.missing or self.null_active or self.stamp or self.derived
                    or self.fts5_writers)


def store_home(conn: Connection) -> Path:
    """The agent's home for this store, where ``sessions/sessions.json`` lives: the store's own
    directory when it holds one, else ``$HERMES_HOME`` when that is set and holds one (the agent
    reads its home's; a store opened by path elsewhere never borrows the user's default home)."""
    own = Path(engine_mod.engine_path(conn.engine)).resolve().parent
    if (own / backfills.GATEWAY_INDEX).is_file() or not os.environ.get("HERMES_HOME", "").strip():
        return own
    home = hermes_home()
    return home if (home / backfills.GATEWAY_INDEX).is_file() else own


def _on_server(conn: Connection) -> bool:
    """The one place adoption tells the backends apart: True on PostgreSQL, where only the
    upgrade, ``reconcile`` and the NULL ``active`` heal apply."""
    return engine_mod.is_server(conn.engine)


def _server_steps(conn: Connection) -> list[str]:
    done = [f"added {name}" for name in migrate.reconcile(conn)]
    if backfills.has_null_active(conn):
        done.append(f"healed {backfills.heal_null_active(conn)} rows with NULL active")
    return done


def _locked_server_steps(conn: Connection) -> list[str]:
    # Behind the upgrades' advisory lock and READ COMMITTED: a second open that waited sees
    # what the first added instead of adding it again.
    engine_mod.lock_for_migration(conn)
    return _server_steps(conn)


def after_upgrade(conn: Connection, home: Path | None = None) -> list[str]:
    """Inside the upgrade transaction, once the revisions reached head: reconcile, the
    agent's data steps for a file stamped below them, the heal, and the stamp."""
    if _on_server(conn):
        return _server_steps(conn)
    done = [f"added {name}" for name in migrate.reconcile(conn)]
    version = migrate.agent_schema_version(conn)
    if version is not None and version < migrate.AGENT_SCHEMA_VERSION:
        done += backfills.run_data_steps(conn, version, home or store_home(conn))
    if backfills.has_null_active(conn):
        done.append(f"healed {backfills.heal_null_active(conn)} rows with NULL active")
    if migrate.stamp_agent_version(conn):
        done.append(f"schema_version {migrate.AGENT_SCHEMA_VERSION}")
    if done:
        log.info("after the upgrade: %s", "; ".join(done))
    return done


def needs(conn: Connection, *, fts5: bool) -> Needs:
    """What a store at head lacks, read without writing."""
    version = migrate.agent_schema_version(conn)
    lowered = version is not None and version < migrate.AGENT_SCHEMA_VERSION
    return Needs(
        missing=migrate.missing_schema(conn),
        null_active=backfills.has_null_active(conn),
        stamp=version is None or lowered,
        data_steps_from=version if lowered else None,
        derived=derived.missing_objects(conn) if fts5 else [],
        fts5_writers=[] if fts5 else index_writers.fts5_writers(conn),
    )


def _complete(conn: Connection, *, fts5: bool) -> list[str]:
    """One unit bringing a store at head to what the facade needs."""
    todo = needs(conn, fts5=fts5)
    done = [f"added {name}" for name in migrate.reconcile(conn)] if todo.missing else []
    if todo.data_steps_from is not None:
        # A stamp lowered on a file at head (an agent's downgrade, or its tests): the agent
        # runs every data step above the stamp and raises it again, and so does this open.
        done += backfills.run_data_steps(conn, todo.data_steps_from, store_home(conn))
    if todo.null_active:
        done.append(f"healed {backfills.heal_null_active(conn)} rows with NULL active")
    if todo.stamp and migrate.stamp_agent_version(conn):
        done.append(f"schema_version {migrate.AGENT_SCHEMA_VERSION}")
    if todo.fts5_writers:
        index_writers.drop_triggers(conn, todo.fts5_writers)
        done.append("no FTS5 here: dropped " + ", ".join(todo.fts5_writers))
    if todo.derived:
        created = derived.recreate_missing(conn)
        storage.rebuild_indexes(conn)
        done.append("restored " + ", ".join(created) + " and rebuilt the indexes")
    return done


def _without_fts5(conn: Connection, state: str) -> list[str]:
    """A store that is not at head, on a runtime without FTS5: writes must work, nothing that
    builds an index can run. Indexes are left to the upgrade (a legacy revision creates some of
    them by name), except on a new file, which gets everything but the search layout."""
    done = []
    writers = index_writers.fts5_writers(conn)
    if writers:
        index_writers.drop_triggers(conn, writers)
        done.append("no FTS5 here: dropped " + ", ".join(writers))
    done += [f"added {name}" for name in migrate.reconcile(conn, indexes=state == "empty")]
    if state == "empty":
        migrate.stamp_agent_version(conn)
    if backfills.has_null_active(conn):
        done.append(f"healed {backfills.heal_null_active(conn)} rows with NULL active")
    return done


def standby_ready(engine: Engine, st: migrate.SchemaStatus) -> list[str]:
    """A hot standby is opened as it is (it cannot be written): it must be at head already,
    which it is once it has replayed the primary's upgrade."""
    if st.state != "up-to-date":
        location = engine_mod.engine_location(engine)
        raise SchemaMismatchError(
            f"{location.display} is a hot standby of a store that is {st.describe()}: run "
            "`hermes-store upgrade` on the primary; the standby follows once it has replayed "
            "it", state=st.state, current=st.current, head=st.head)
    return []


def prepare(engine: Engine) -> list[str]:
    """Bring the store behind ``engine`` to what the facade needs; returns what was done.

    Raises ``SchemaMismatchError`` for a store this code cannot adopt (ahead, unknown).
    """
    with engine_mod.reading(engine) as conn:
        before = migrate.status_of(conn)
        server = _on_server(conn)
    migrate.refuse(before)
    done: list[str] = []
    if server and postgres.is_standby(engine):
        return standby_ready(engine, before)
    if server:
        if before.state != "up-to-date":
            migrate.upgrade(engine)
            done.append(f"upgraded from {before.describe()}")
        with engine_mod.reading(engine) as conn:
            server_todo = bool(migrate.missing_schema(conn)) or backfills.has_null_active(conn)
        if server_todo:
            done += engine_mod.run_write(engine, _locked_server_steps,
                                         budget=migrate.UPGRADE_BUDGET_S, what="open",
                                         isolation=engine_mod.READ_COMMITTED)
        return done
    fts5 = engine_mod.fts5_available()
    if before.state != "up-to-date":
        if not fts5:
            log.warning("this SQLite has no FTS5: %s stays %s until an open with FTS5; "
                        "search returns nothing meanwhile", engine_mod.engine_path(engine),
                        before.describe())
            return engine_mod.run_write(engine, lambda c: _without_fts5(c, before.state),
                                        budget=migrate.UPGRADE_BUDGET_S, what="open")
        migrate.upgrade(engine)
        done.append(f"upgraded from {before.describe()}")
    with engine_mod.reading(engine) as conn:
        todo = needs(conn, fts5=fts5)
    if todo:
        done += engine_mod.run_write(engine, lambda c: _complete(c, fts5=fts5),
                                     budget=migrate.UPGRADE_BUDGET_S, what="open")
    if done:
        log.info("%s: %s", engine_mod.engine_path(engine), "; ".join(done))
    return done
