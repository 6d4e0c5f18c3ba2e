"""The one SQLite connection policy: how every connection this library opens to a store file
is made (URI and read-only rules, busy timeout, pragmas, text decoding, the agent's tokenizer,
WAL with its one fallback). ``db.engine`` builds its pooled engines on :func:`connect`; the
reading commands' stdlib path (``db.raw``) opens its one connection with it too, so the rules
live here once. Importing this module loads no SQLAlchemy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
import threading
from pathlib import Path

from hermes_store.db.sqlite_driver import decode_text, load_agent_tokenizer, unwrap

log = logging.getLogger("hermes_store.db.engine")  # the WAL warning's historical logger

BUSY_TIMEOUT_S = 1.0
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024

# Errors that mean "this filesystem cannot do WAL's shared-memory locks" (network and FUSE
# mounts). "disk I/O error" is not one of them: it can be transient, and one process falling back
# to DELETE while others keep WAL corrupts the file (docs/v21.md#open-time-behaviour).
_WAL_UNSUPPORTED = ("locking protocol", "not authorized")
_HEADER_WAL = b"\x02\x02"  # bytes 18 and 19 of the header: 2 when the file is in WAL mode

_warned_lock = threading.Lock()
_wal_warned: set[str] = set()


def _on_disk_mode_is_wal(conn: sqlite3.Connection) -> bool:
    """Whether the file itself says WAL: the journal mode if it reads, else the header bytes."""
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
    except sqlite3.Error:
        pass
    try:
        row = next((r for r in conn.execute("PRAGMA database_list") if r[1] == "main"), None)
        if row is None or not row[2]:
            return False
        with open(row[2], "rb") as fh:
            fh.seek(18)
            return fh.read(2) == _HEADER_WAL
    except (OSError, sqlite3.Error):
        return False


def _durable_on_macos(conn: sqlite3.Connection) -> None:
    # macOS's fsync does not reach the platter; F_FULLFSYNC does (best effort: a pragma this
    # build lacks is simply ignored).
    if sys.platform != "darwin":
        return
    for pragma in ("PRAGMA checkpoint_fullfsync=1", "PRAGMA synchronous=FULL"):
        with contextlib.suppress(sqlite3.Error):
            conn.execute(pragma)


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Put any raw connection in WAL mode; ``"delete"`` only where the filesystem refuses WAL.

    A file already in WAL is left alone: setting the mode again can unlink sidecars other
    processes hold. On ``locking protocol``/``not authorized`` (NFS, SMB, FUSE) the connection
    falls back to ``DELETE`` and warns once per ``db_label`` per process, unless the file is
    in WAL already (other processes use it that way: downgrading one of them corrupts it).
    Every other error propagates, ``disk I/O error`` included.
    """
    try:
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            _durable_on_macos(conn)
            return "wal"
    except sqlite3.Error:
        pass  # the setting pragma below reports the real problem
    try:
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
    except sqlite3.Error as err:
        if not any(s in str(err).lower() for s in _WAL_UNSUPPORTED):
            raise
        if _on_disk_mode_is_wal(conn):
            raise
        with _warned_lock:
            first = db_label not in _wal_warned
            _wal_warned.add(db_label)
        if first:
            log.warning("%s: WAL is not supported here (%s); using journal_mode=DELETE",
                        db_label, err)
        conn.execute("PRAGMA journal_mode=DELETE").fetchall()
        return "delete"
    _durable_on_macos(conn)
    return "wal"


def _set_wal(dbapi: sqlite3.Connection, path: str) -> None:
    # An in-memory database has no WAL to set (and nothing to fall back from).
    if str(dbapi.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "memory":
        return
    apply_wal_with_fallback(dbapi, db_label=path)


def connect(path: str, readonly: bool) -> sqlite3.Connection:
    """A new connection to the store file at ``path`` under the policy (see the module)."""
    if readonly:  # immutable: no -wal to read, and no -shm can be made (a read-only dir)
        frozen = not (os.access(os.path.dirname(path), os.W_OK) or os.path.exists(f"{path}-wal"))
        target = Path(path).resolve().as_uri() + ("?mode=ro&immutable=1" if frozen else "?mode=ro")
        dbapi = sqlite3.connect(target, uri=True, timeout=BUSY_TIMEOUT_S,
                                check_same_thread=False, isolation_level=None)
    else:
        dbapi = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                                isolation_level=None)
    # Legacy rows and other programs hold text that is not valid UTF-8 (SQLite's JSON
    # functions turn a lone-surrogate escape such as "\ud83d" into such bytes): one bad cell
    # must degrade to replacement characters, not make a search, an export or an append raise.
    dbapi.text_factory = decode_text
    try:
        dbapi.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        dbapi.execute("PRAGMA foreign_keys=ON")
        dbapi.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        if not readonly:
            _set_wal(dbapi, path)
        load_agent_tokenizer(dbapi)  # the agent's CJK triggers need it to write
    except sqlite3.DatabaseError as err:
        dbapi.close()
        raise unwrap(err, path) from err
    return dbapi
