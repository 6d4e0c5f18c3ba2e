"""The agent's own probe and schema repair: ``_db_opens_cleanly`` and ``repair_state_db_schema``
(docs/v21.md#module-names), which an open also uses on a malformed schema.

These work on a raw ``sqlite3`` connection, not the engine: the schema they look at may not
even parse, and every pooled connection would have cached it. The probe tells "fresh" from
"broken" by what the catalog holds (``db.catalog``), and writes through the index triggers inside a
transaction it always rolls back (an index that rejects writes while reads pass shows only
then; docs/lessons.md#damage). A lock is reported and never repaired: it is
not damage.

The repair backs the file up first (raw copies of the file and its sidecars, which stay where
they are), then stops at the first step after which the probe passes: FTS5 ``rebuild`` of
every full-text table; removing duplicate schema rows; dropping every ``messages_fts*`` schema
row and vacuuming (the next open of the facade rebuilds the search layout). It never touches a
row of ``sessions`` or ``messages``, and refuses while other processes hold the file.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_store.db import catalog, index_writers, names
from hermes_store.errors import HermesStoreError
from hermes_store.ops.holders import ensure_not_held
from hermes_store.ops.repair import duplicate_schema_rows, remove_duplicate_schema_rows

PROBE_SESSION = "__hermes_store_probe__"
_FRESH = ("no such table", "no such column")
_LOCKED = ("database is locked", "database table is locked", "busy")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFILL = {names.WORD_INDEX: f"SELECT id, content, tool_name, tool_calls FROM {names.WORD_SOURCE}",
           names.TRIGRAM_INDEX: f"SELECT id, content, tool_name FROM {names.TRIGRAM_SOURCE}"}


def _quote(name: str) -> str:
    """A schema object's name, double-quoted; anything but a plain identifier is refused."""
    if not _IDENTIFIER.fullmatch(name):
        raise sqlite3.DatabaseError(f"refusing a schema object with an odd name: {name!r}")
    return f'"{name}"'


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=1.0,
                           isolation_level=None)


def is_lock_reason(reason: str | None) -> bool:
    return reason is not None and any(s in reason.lower() for s in _LOCKED)


def _write_probe(con: sqlite3.Connection) -> None:
    now = time.time()
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'probe', ?)",
                    (PROBE_SESSION, now))
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES (?, 'user', 'hermes-store write probe', ?)", (PROBE_SESSION, now))
    finally:
        if con.in_transaction:  # SQLite may have rolled back itself (on corruption)
            con.execute("ROLLBACK")


def _is_fresh(con: sqlite3.Connection) -> bool:
    try:
        return not catalog.has_table(con, "messages")
    except sqlite3.Error:
        return False


def db_opens_cleanly(db_path: str | Path) -> str | None:
    """None when the store opens, reads and writes; else why not. Never raises for database
    errors (a missing file is a reason too: nothing is created)."""
    path = Path(db_path)
    if not path.exists():
        return f"{path} does not exist"
    try:
        con = _connect(path)
    except sqlite3.Error as err:
        return str(err)
    try:
        con.execute("PRAGMA journal_mode").fetchall()
        rows = [str(r[0]) for r in con.execute("PRAGMA integrity_check")]
        if rows != ["ok"]:
            return "; ".join(rows[:3])
        con.execute("SELECT COUNT(*) FROM sessions").fetchall()
        _write_probe(con)
    except sqlite3.Error as err:
        text = str(err)
        if any(s in text.lower() for s in _FRESH) and _is_fresh(con):
            return None
        return text
    finally:
        con.close()
    return None


# --------------------------------------------------------------------------- repair steps


def _fts5_tables(con: sqlite3.Connection) -> dict[str, str]:
    return {name: sql for name, sql in catalog.table_definitions(con).items()
            if index_writers.is_fts5(sql)}


def _rebuild_fts(path: Path) -> None:
    """FTS5 ``rebuild`` of each full-text table; an external-content index whose content view
    FTS5 cannot scan itself is refilled from that view instead."""
    con = _connect(path)
    try:
        con.execute("BEGIN IMMEDIATE")
        for name in _fts5_tables(con):
            try:
                con.execute("SAVEPOINT rebuild")
                con.execute(f"INSERT INTO {_quote(name)}({_quote(name)}) VALUES ('rebuild')")
                con.execute("RELEASE rebuild")
            except sqlite3.Error:
                con.execute("ROLLBACK TO rebuild")
                con.execute("RELEASE rebuild")
                _refill(con, name)
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
    finally:
        con.close()


def _refill(con: sqlite3.Connection, name: str) -> None:
    if name not in _REFILL:
        raise sqlite3.DatabaseError(f"{name} cannot be rebuilt")
    columns = ", ".join(_quote(c.name) for c in catalog.columns(con, name))
    con.execute(f"INSERT INTO {_quote(name)}({_quote(name)}) VALUES ('delete-all')")
    con.execute(f"INSERT INTO {_quote(name)}(rowid, {columns}) {_REFILL[name]}")


def _dedup_schema(path: Path) -> None:
    dups = duplicate_schema_rows(path)
    if dups:
        remove_duplicate_schema_rows(path, dups)


def _drop_fts_rebuild(path: Path) -> None:
    """Remove every ``messages_fts*`` schema row (the indexes, their shadow tables, views and
    triggers) and the triggers left writing to what is gone, then VACUUM away their pages."""
    con = _connect(path)
    try:
        con.execute("PRAGMA writable_schema=ON")
        con.execute("BEGIN IMMEDIATE")
        catalog.drop_search_entries(con)
        con.execute("COMMIT")
        con.execute("PRAGMA writable_schema=RESET")
        relations = {name.lower() for name in catalog.relations(con)}
        dead = [name for name, sql in catalog.triggers(con)
                if index_writers.written_tables(sql or "") - relations]
        for name in dead:
            con.execute(f"DROP TRIGGER IF EXISTS {_quote(name)}")
        con.execute("VACUUM")
    finally:
        con.close()


STEPS: tuple[tuple[str, Callable[[Path], None]], ...] = (
    ("rebuild_fts", _rebuild_fts),
    ("dedup_schema", _dedup_schema),
    ("drop_fts_rebuild", _drop_fts_rebuild),
)


def _backup(path: Path) -> str | None:
    target = Path(f"{path}.malformed-backup-{time.strftime('%Y%m%d_%H%M%S')}")
    try:
        shutil.copy2(path, target)
        for suffix in ("-wal", "-shm"):
            sidecar = Path(f"{path}{suffix}")
            if sidecar.exists():
                shutil.copy2(sidecar, Path(f"{target}{suffix}"))
    except OSError:
        return None
    return str(target)


def repair_state_db_schema(db_path: str | Path, *, backup: bool = True) -> dict[str, Any]:
    """``{repaired, strategy, backup_path, error}``; never raises."""
    path = Path(db_path)
    result: dict[str, Any] = {"repaired": False, "strategy": None, "backup_path": None,
                              "error": None}
    if not path.exists():
        result["error"] = f"{path} does not exist"
        return result
    reason = db_opens_cleanly(path)
    if reason is None:
        result.update(repaired=True, strategy="already_healthy")
        return result
    if is_lock_reason(reason):
        result["error"] = reason  # contention, not damage: nothing to repair
        return result
    try:
        ensure_not_held(path, what="repairing its schema")
    except HermesStoreError as err:
        result["error"] = str(err)
        return result
    if backup:
        result["backup_path"] = _backup(path)
    for strategy, step in STEPS:
        try:
            step(path)
        except (sqlite3.Error, OSError, HermesStoreError) as err:
            reason = str(err)
            continue
        reason = db_opens_cleanly(path)
        if reason is None:
            result.update(repaired=True, strategy=strategy)
            return result
    result["error"] = reason
    return result
