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
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_store.errors import (
    AgentTokenizerError,
    HermesStoreError,
    SchemaMismatchError,
    SearchIndexDamagedError,
    SearchIndexMissingError,
    StoreBusyError,
    StoreDamagedError,
    StoreFullError,
)
from hermes_store.paths import hermes_home

if TYPE_CHECKING:
    from sqlalchemy.pool import PoolProxiedConnection

# A derived search table that is gone while its triggers remain: every append then fails.
_SEARCH_TABLE_MISSING = re.compile(r"no such table: (?:main\.)?((?:hs_|messages_(?:fts|cjk))\w*)")


def dbapi_of(pooled: PoolProxiedConnection) -> sqlite3.Connection:
    """The pysqlite connection behind a file store's pooled connection (``conn.connection``,
    ``engine.raw_connection()``), which SQLAlchemy types as any driver's."""
    driver = pooled.driver_connection
    if not isinstance(driver, sqlite3.Connection):
        raise TypeError(f"a SQLite store's connection holds {type(driver).__name__}, "
                        "not a sqlite3 connection")
    return driver


# --------------------------------------------------------------------------- the agent's tokenizer

# The agent's native CJK tokenizer: where the agent finds it decides where we look.
AGENT_TOKENIZER = "cjk_unicode61"
_NO_AGENT_TOKENIZER = f"no such tokenizer: {AGENT_TOKENIZER}"
# Why this process has not loaded it (None once it has): the advice of AgentTokenizerError.
_agent_tokenizer_problem: str | None = "no connection has tried to load it yet"


def agent_tokenizer_library() -> Path:
    """``$HERMES_FTS5_CJK_SO``, else ``$HERMES_HOME/lib/libfts5_cjk.so`` (the agent's order)."""
    explicit = os.environ.get("HERMES_FTS5_CJK_SO", "").strip()
    return Path(explicit).expanduser() if explicit else hermes_home() / "lib" / "libfts5_cjk.so"


def load_agent_tokenizer(dbapi: sqlite3.Connection) -> bool:
    """Load the agent's tokenizer library on ``dbapi`` when it is installed and this Python can
    load extensions; True when loaded. Where the agent's CJK triggers exist, only a connection
    that loaded it can write to ``messages``."""
    global _agent_tokenizer_problem
    library = agent_tokenizer_library()
    if not library.is_file():
        _agent_tokenizer_problem = f"the agent's tokenizer library is not at {library}"
        return False
    if not hasattr(dbapi, "enable_load_extension"):
        _agent_tokenizer_problem = (f"this Python's sqlite3 ({sys.executable}) cannot load "
                                    f"extensions, so the agent's library {library} is not loaded")
        return False
    try:
        dbapi.enable_load_extension(True)
        dbapi.load_extension(str(library))
    except sqlite3.Error as err:
        _agent_tokenizer_problem = f"loading the agent's library {library} failed: {err}"
        return False
    finally:
        dbapi.enable_load_extension(False)
    _agent_tokenizer_problem = None
    return True


def agent_tokenizer_problem() -> str | None:
    """Why this process has not loaded the agent's tokenizer; None when it has."""
    return _agent_tokenizer_problem


def agent_tokenizer_error(detail: object) -> AgentTokenizerError:
    why = _agent_tokenizer_problem or "this connection has not loaded it"
    return AgentTokenizerError(
        f"{detail}: the agent's CJK search objects (messages_fts_cjk and its triggers) need its "
        f"tokenizer {AGENT_TOKENIZER}, and {why}; the write to messages was refused and "
        "nothing was written. Either run hermes_store on a Python whose sqlite3 can load "
        "extensions (Debian's python3 can; the agent's library is found at $HERMES_FTS5_CJK_SO, "
        "else $HERMES_HOME/lib/libfts5_cjk.so), or run `hermes-store repair --drop-agent-cjk` "
        "to remove the agent's CJK objects (the agent rebuilds them when it next loads its "
        "library). Reads and searches keep working.")


def driver_errors() -> tuple[type[BaseException], ...]:
    """What a failed statement raises: ``sqlite3``'s classes on a stdlib connection (db.raw),
    SQLAlchemy's wrapper once SQLAlchemy is loaded (it cannot be raised before)."""
    exc = sys.modules.get("sqlalchemy.exc")
    return (sqlite3.Error,) if exc is None else (sqlite3.Error, exc.DBAPIError)


def _sqlite_error(err: BaseException) -> BaseException:
    """The DB-API exception behind a SQLAlchemy wrapper (or the error itself)."""
    # Read without importing SQLAlchemy (the reading commands' stdlib path never loads it):
    # while it is not loaded, no error can be one of its wrappers.
    exc = sys.modules.get("sqlalchemy.exc")
    if exc is not None and isinstance(err, exc.DBAPIError) and isinstance(err.orig, BaseException):
        return err.orig
    return err


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

# FTS5's words for a MATCH expression it cannot parse: the only failures of a search that mean
# "bad query" (docs/search.md#damage). Everything else FTS5 says is about the index itself.
FTS5_QUERY_ERRORS = ("syntax error", "unterminated string", "no such column", "malformed match",
                     "parser stack overflow", "unknown special query")
# What FTS5 says about an index it cannot use: a record of the wrong format ("invalid fts5 file
# format … run 'rebuild'"), an index that fails to load ("vtable constructor failed: NAME"),
# its own "fts5: …" findings. Corrupt pages read through it say "malformed" (SQLITE_CORRUPT).
_INDEX_DAMAGE = ("invalid fts5 file format", "vtable constructor failed", "fts5")
_CORRUPT = ("database disk image is malformed", "corrupt")


def is_fts5_query_error(err: BaseException) -> bool:
    """True when FTS5 refused a MATCH expression (and nothing else)."""
    text = str(_sqlite_error(err)).lower()
    return any(marker in text for marker in FTS5_QUERY_ERRORS)


def is_index_damage(err: BaseException) -> bool:
    """True for an error only a damaged FTS5 index gives (never a query error)."""
    inner = _sqlite_error(err)
    if not isinstance(inner, sqlite3.DatabaseError) or is_fts5_query_error(inner):
        return False
    text = str(inner).lower()
    # "no such module: fts5" is a runtime without FTS5, not a damaged index (docs/search.md).
    return "no such module" not in text and any(marker in text for marker in _INDEX_DAMAGE)


def is_corrupt(err: BaseException) -> bool:
    """True for SQLITE_CORRUPT: a page that does not read as what it should be."""
    inner = _sqlite_error(err)
    code = getattr(inner, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF) == sqlite3.SQLITE_CORRUPT:
        return True
    text = str(inner).lower()
    return isinstance(inner, sqlite3.DatabaseError) and any(m in text for m in _CORRUPT)


def search_index_damaged(err: BaseException | str,
                         indexes: tuple[str, ...] = ()) -> SearchIndexDamagedError:
    """The error a caller gets for a damaged search index: what was found, the indexes (those
    SQLite's words name, else all of ``indexes``) and the command that rebuilds them."""
    text = err if isinstance(err, str) else str(_sqlite_error(err))
    named = tuple(i for i in indexes if re.search(rf"\b{re.escape(i)}\b", text)) or indexes
    which = f"the search index {', '.join(named)}" if named else "a search index"
    return SearchIndexDamagedError(
        f"{text}: {which} is damaged (it is derived from the messages, which it does not "
        "hold); run `hermes-store repair` to rebuild it, `hermes-store doctor` to see whether "
        "anything else is damaged", indexes=named)


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
    if isinstance(inner, sqlite3.OperationalError) and _NO_AGENT_TOKENIZER in str(inner).lower():
        return agent_tokenizer_error(inner)
    missing = _SEARCH_TABLE_MISSING.search(str(inner))
    if isinstance(inner, sqlite3.OperationalError) and missing:
        return SearchIndexMissingError(
            f"{inner}: the search index {missing.group(1)} is missing (the messages themselves "
            "are intact); run `hermes-store repair` to restore it")
    if is_index_damage(inner) or (
            # SQLITE_CONSTRAINT without a message: only a virtual table's write says that (every
            # constraint of ours names itself): FTS5 writing a segment its broken structure
            # record no longer lists.
            isinstance(inner, sqlite3.IntegrityError) and str(inner) == "constraint failed"):
        return search_index_damaged(inner)
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
