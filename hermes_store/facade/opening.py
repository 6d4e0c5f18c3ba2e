"""How ``SessionDB(...)`` opens a store, and what it remembers when it cannot
(docs/v21.md#open-time-behaviour).

A read-write open brings the file to what the facade needs (``ops.adoption.prepare``). When
that fails on a malformed schema, the open repairs it once per path per process and tries
again: the claim is process-wide, so two threads opening the same damaged file do not both
repair it, and a second failure raises. Every exception leaving the constructor is recorded
for ``get_last_init_error`` (the agent prints it when it runs without its store); a success
never clears it, so a concurrent success cannot erase another thread's cause.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from sqlalchemy import Engine

from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate, postgres, replica
from hermes_store.errors import SchemaMismatchError
from hermes_store.ops import adoption
from hermes_store.ops.schema_repair import repair_state_db_schema
from hermes_store.paths import StoreLocation, resolve_read_location

log = logging.getLogger("hermes_store.facade")

_lock = threading.Lock()
_last_init_error: str | None = None
# Resolved paths this process has tried to repair (at most once each); the agent's tests clear
# or replace this set by name, so the open path reads it through the module at each call.
_repair_attempted_paths: set[str] = set()
_no_fts5_noted = False

_NETWORK_FS_HINT = (" (the database may be on a network or FUSE filesystem such as NFS/SMB, "
                    "where SQLite's WAL locking does not work; see "
                    "https://www.sqlite.org/wal.html)")


def note_no_fts5() -> None:
    """Say once per process why search answers nothing, then quietly (a gateway searches
    often, and one warning says it all)."""
    global _no_fts5_noted
    with _lock:
        first, _no_fts5_noted = not _no_fts5_noted, True
    (log.warning if first else log.debug)(
        "search_messages: this SQLite has no FTS5, so there is no search index; "
        "returning no results")


def _set_last_init_error(error: BaseException | str | None) -> None:
    """Remember why an open failed (an exception becomes ``"Class: message"``); ``None``
    forgets it. The agent's name: its tests call it to reset the state between cases."""
    global _last_init_error
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
    with _lock:
        _last_init_error = text


def get_last_init_error() -> str | None:
    """``"<ExceptionClassName>: <message>"`` of this process's latest failed open, or None."""
    with _lock:
        return _last_init_error


def format_session_db_unavailable(prefix: str = "Session database not available") -> str:
    """The line the agent prints when it runs without its store: the prefix, the last open
    failure, and a hint when that failure is the filesystem refusing SQLite's locks."""
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    lowered = cause.lower()
    hint = _NETWORK_FS_HINT if ("locking protocol" in lowered
                                or "not authorized" in lowered) else ""
    return f"{prefix}: {cause}{hint}."


def _claim_repair(path: Path) -> bool:
    key = str(path.resolve())
    with _lock:
        if key in _repair_attempted_paths:
            return False
        _repair_attempted_paths.add(key)
        return True


def _prepare(location: StoreLocation) -> Engine:
    engine = engine_mod.open_engine(location)
    adoption.prepare(engine)
    return engine


def open_read_write(location: StoreLocation) -> Engine:
    """The engine of a store ready for the facade; a malformed SQLite schema is repaired once
    (a server has no file to repair)."""
    try:
        return _prepare(location)
    except Exception as err:
        path = location.path
        if (path is None or not engine_mod.is_malformed_db_error(err)
                or not _claim_repair(path)):
            raise
        # Pooled connections cached the broken schema; the repair needs the file to itself.
        engine_mod.forget(path)
        result = repair_state_db_schema(path)
        if not result["repaired"]:
            log.warning("%s: schema repair failed (%s)", path, result["error"])
            raise
        log.warning("%s: malformed schema repaired (%s; backup %s)", path,
                    result["strategy"], result["backup_path"])
    return _prepare(location)


def open_store(location: StoreLocation, *, read_only: bool) -> Engine:
    """The engine ``SessionDB`` serves from: read-write brings the store to what the facade
    needs (creating the file's folder); read-only does no schema work and refuses a store
    behind head. A server's engine is held until :func:`close_store`."""
    engine = _open_store(location, read_only=read_only)
    if engine_mod.is_server(engine):
        postgres.hold(engine)
    return engine


def close_store(engine: Engine) -> None:
    """A ``SessionDB`` closed: the last one on a server's engine closes its connections."""
    if engine_mod.is_server(engine):
        postgres.release(engine)


def _open_store(location: StoreLocation, *, read_only: bool) -> Engine:
    if not read_only:
        if location.path is not None:
            location.path.parent.mkdir(parents=True, exist_ok=True)
        return open_read_write(location)
    st = migrate.status(location)
    if st.state == "missing":
        engine_mod.open_engine(location, readonly=True)  # raises StoreNotFoundError
    if st.state != "up-to-date":
        raise SchemaMismatchError(
            f"the store at {location} is {st.describe()}; run `hermes-store upgrade` "
            "(a read-only open never migrates)", state=st.state, current=st.current,
            head=st.head)
    return engine_mod.open_engine(location, readonly=True)


def read_route(engine: Engine, location: StoreLocation,
               read: str | StoreLocation | None) -> replica.ReadRoute | None:
    """Where searches and listings of the store at ``location`` go: its read location (the
    argument, else ``$HERMES_STORE_READ_URL``), opened read-only at head; None without one."""
    found = resolve_read_location(read, location)
    if found is None:
        return None
    return replica.ReadRoute(engine, open_store(found, read_only=True))
