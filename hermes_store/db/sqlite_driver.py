"""What the sqlite3 driver hands us, made into what our callers are promised.

Split out of :mod:`hermes_store.db.engine` (which re-exports every name): which driver errors
are lock contention to retry, a full disk, a malformed file an open may repair; :func:`unwrap`,
which turns a wrapped driver error into the ``sqlite3``-derived type a v11 caller catches; and
the text factory that keeps undecodable stored text readable and lossless.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3

from sqlalchemy import exc

from hermes_store.errors import (
    HermesStoreError,
    SchemaMismatchError,
    SearchIndexMissingError,
    StoreBusyError,
    StoreDamagedError,
    StoreFullError,
)

# A derived search table that is gone while its triggers remain: every append then fails.
_SEARCH_TABLE_MISSING = re.compile(r"no such table: (?:main\.)?(messages_(?:fts|cjk)\w*)")


def _sqlite_error(err: BaseException) -> BaseException:
    """The DB-API exception behind a SQLAlchemy wrapper (or the error itself)."""
    return err.orig if isinstance(err, exc.DBAPIError) and err.orig is not None else err


def is_lock_error(err: BaseException) -> bool:
    inner = _sqlite_error(err)
    if not isinstance(inner, sqlite3.OperationalError) or isinstance(inner, StoreBusyError):
        return False
    code = getattr(inner, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    # Only an error without a code is judged by its text: "no such table: blocked_users" or a
    # trigger's RAISE mentioning "busy" must fail at once, not be retried for the whole budget.
    text = str(inner).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def is_full_error(err: BaseException) -> bool:
    inner = _sqlite_error(err)
    code = getattr(inner, "sqlite_errorcode", None)
    return (code is not None and (code & 0xFF) == sqlite3.SQLITE_FULL) or (
        "database or disk is full" in str(inner).lower()
    )


# Below this much free space an I/O error is taken for a full disk: SQLite reports a ``-shm``
# it cannot create or grow (32 KiB at a time) as SQLITE_IOERR_SHMSIZE, not SQLITE_FULL, so a
# process opening a store on a full disk fails every read with a bare "disk I/O error".
_FULL_BELOW_BYTES = 1024 * 1024


def _io_error_on_a_full_disk(inner: BaseException, path: str | None) -> bool:
    code = getattr(inner, "sqlite_errorcode", None)
    if code is None or (code & 0xFF) != sqlite3.SQLITE_IOERR or not path:
        return False
    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < _FULL_BELOW_BYTES
    except OSError:
        return False


_MALFORMED = ("malformed database schema", "database disk image is malformed")


def is_malformed_db_error(err: object) -> bool:
    """A ``sqlite3.DatabaseError`` (any subclass, ours included) saying the schema or the file
    is malformed: the errors an open may try to repair in place. Never raises."""
    try:
        inner = _sqlite_error(err) if isinstance(err, BaseException) else err
        if not isinstance(inner, sqlite3.DatabaseError) and not isinstance(
                err, sqlite3.DatabaseError):
            return False
        text = f"{err} {inner}".lower()
        return any(marker in text for marker in _MALFORMED)
    except Exception:  # noqa: BLE001 - a classifier must not fail on an odd exception
        return False


def unwrap(err: BaseException, path: str | None = None) -> BaseException:
    """Translate a driver error into what our callers are promised.

    SQLAlchemy wraps sqlite3 errors; v11 callers catch the ``sqlite3`` classes, so we hand
    those back, and turn a few conditions into our own (still ``sqlite3``-derived) types,
    naming the store's ``path`` in the advice when it is known.
    """
    inner = _sqlite_error(err)
    if isinstance(inner, HermesStoreError):
        return inner  # already translated by the connect hook: wrapping again repeats the advice
    missing = _SEARCH_TABLE_MISSING.search(str(inner))
    if isinstance(inner, sqlite3.OperationalError) and missing:
        return SearchIndexMissingError(
            f"{inner}: the search index {missing.group(1)} is missing (the messages themselves "
            "are intact); run `hermes-store repair` to restore it")
    if is_full_error(inner):
        return StoreFullError(f"disk full: the database or disk is full; the write was rolled "
                              f"back; free some space and retry ({inner})")
    if _io_error_on_a_full_disk(inner, path):
        return StoreFullError(
            f"disk full: the filesystem holding {path} has no room left, so SQLite cannot "
            f"create or grow the store's files ({inner}); free some space and retry (the store "
            "itself is not damaged and nothing was written)")
    text = str(inner).lower()
    if isinstance(inner, sqlite3.DatabaseError) and (
        "file is not a database" in text or "malformed" in text
    ):
        store = f"the store {path}" if path else "the store"
        return StoreDamagedError(
            f"{inner}: {store} is damaged; run `hermes-store repair --check-only` on it, then "
            f"`hermes-store recover --source {path or 'PATH'} --output NEW.db`"
        )
    if isinstance(inner, sqlite3.OperationalError) and text.startswith("no such column"):
        # The code reads a column the file lacks: a store not yet upgraded (legacy or behind).
        return SchemaMismatchError(
            f"{inner}: the store{f' at {path}' if path else ''} lacks columns this code reads; "
            "if it was not upgraded, run `hermes-store upgrade` (`hermes-store current` says "
            "where it stands)")
    return inner


class UndecodableText(str):
    """Stored text that is not valid UTF-8: reads as replacement characters, keeps ``raw``.

    Readers that must be lossless (the jsonl backup) export ``raw``; everything else just sees
    a string.
    """

    raw: bytes


def decode_text(raw: bytes) -> str:
    """The text factory of every connection that reads a store: UTF-8, or
    :class:`UndecodableText` keeping the bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = UndecodableText(raw.decode("utf-8", "replace"))
        text.raw = raw
        return text
