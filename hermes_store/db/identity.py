"""Which files an open store is: the main file, its ``-wal`` and its ``-shm``, as (device,
inode) pairs, and the check that refuses a write when the path no longer names the files a
connection has open (:func:`check_same_files`, run by ``db.engine`` inside every write unit).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.pool import ConnectionPoolEntry

from hermes_store.errors import StoreReplacedError

# The ``-wal`` and ``-shm`` a connection opened, as (device, inode) or None (not in WAL mode):
# in the pool record's info, so each connection is compared with its own.
_SIDECARS = "hermes_sidecars"
_SIDECAR_SUFFIXES = ("-wal", "-shm")


def sidecar_ids(path: str) -> tuple[tuple[int, int] | None, ...]:
    return tuple(of(path + suffix) for suffix in _SIDECAR_SUFFIXES)


def note_sidecars(path: str, _dbapi: sqlite3.Connection, record: ConnectionPoolEntry) -> None:
    # The connect hook has run ``PRAGMA journal_mode``, which opens (or creates) both files.
    record.info[_SIDECARS] = sidecar_ids(path)


def of(path: str) -> tuple[int, int] | None:
    """The file's (device, inode), or None when nothing is there."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def check_same_files(path: str, info: dict[str, Any], conn: Connection) -> None:
    """Refuse to write when the path no longer names the files ``conn`` has open: the store,
    its ``-wal`` and its ``-shm``.

    In WAL mode SQLite keeps committing into a deleted or replaced file without a word (only
    rollback journals report SQLITE_READONLY_DBMOVED), so every later write would be lost while
    the caller is told it succeeded. The same holds for a deleted ``-wal`` (commits go to the
    unlinked file and vanish with the process) and ``-shm`` (the next process makes a new one
    and no longer sees our locks). While a connection is open SQLite never deletes either
    itself, so any change of them under an open connection is someone else's doing.
    """
    expected = info.get("identity")
    if expected is None:
        return
    if of(path) != expected:
        raise StoreReplacedError(
            f"{path} was deleted or replaced while this process had it open; nothing was "
            "written. Restart the process so that it opens the current file.")
    opened_by = conn.connection.info
    opened, current = opened_by.get(_SIDECARS), sidecar_ids(path)
    if opened is None:
        return
    # Both tuples come from sidecar_ids, one entry per suffix.
    for suffix, was, now in zip(_SIDECAR_SUFFIXES, opened, current, strict=True):
        if was is not None and now != was and _holds_unlinked(path + suffix) is not False:
            raise StoreReplacedError(
                f"{path}{suffix} was deleted or replaced while this process had the store open"
                "; nothing was written (commits into it would be lost). Stop every process "
                "using the store, then reopen it; run `hermes-store doctor` afterwards.")
    if opened != current:
        # A new file gets its WAL with its first transaction (this one); and a connection that
        # has not read yet holds no lock, so the last other connection may have deleted the WAL
        # it saw at connect (and a later one made a new one) without anything going wrong.
        opened_by[_SIDECARS] = current


_FDS = "/proc/self/fd"


def _holds_unlinked(path: str) -> bool | None:
    """Whether this process holds ``path`` open although the path no longer names it (Linux:
    the descriptor's link reads ``… (deleted)``); None where that cannot be seen.

    The (device, inode) noted at connect can differ from the file's now without harm: SQLite
    opens the ``-wal`` with the connection's first transaction, not at connect, and until then
    holds no lock that keeps the last other connection from deleting it. Only a file we still
    have open and that is gone from its path loses commits."""
    try:
        fds = os.listdir(_FDS)
    except OSError:
        return None
    gone = os.path.realpath(path) + " (deleted)"
    for fd in fds:
        try:
            if os.readlink(f"{_FDS}/{fd}") == gone:
                return True
        except OSError:
            continue
    return False
