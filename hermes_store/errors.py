"""The package's exceptions.

Each error subclasses the standard ``sqlite3`` class a v11 caller already catches (so code written
against the agent's old store keeps working) and carries the CLI exit code documented in
docs/cli.md#exit-codes plus the fields a caller needs to act on it.
"""

from __future__ import annotations

import sqlite3


class HermesStoreError(Exception):
    """Base of every error raised on purpose by hermes_store."""

    exit_code = 1
    code = "error"


class StoreBusyError(HermesStoreError, sqlite3.OperationalError):
    """The write lock was not obtained within the time budget."""

    exit_code = 5
    code = "busy"

    def __init__(self, message: str, *, waited_s: float = 0.0, attempts: int = 0):
        super().__init__(message)
        self.waited_s = waited_s
        self.attempts = attempts


class StoreHeldError(HermesStoreError, sqlite3.OperationalError):
    """A whole-file operation was refused because other processes hold the store."""

    exit_code = 5
    code = "held"

    def __init__(self, message: str, *, holders: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.holders = holders or []


class SchemaMismatchError(HermesStoreError, sqlite3.OperationalError):
    """The store's schema is behind, ahead of, or unknown to this code."""

    exit_code = 6
    code = "schema_mismatch"

    def __init__(self, message: str, *, state: str = "behind", current: str | None = None,
                 head: str | None = None):
        super().__init__(message)
        self.state = state
        self.current = current
        self.head = head


class StoreDamagedError(HermesStoreError, sqlite3.DatabaseError):
    """The file is not a usable database, or its canonical data is damaged."""

    exit_code = 7
    code = "damaged"


class StoreNotFoundError(HermesStoreError, sqlite3.OperationalError):
    """A read-only open was asked for a store that does not exist."""

    exit_code = 3
    code = "not_found"


class StoreFullError(HermesStoreError, sqlite3.OperationalError):
    """The disk (or the database's page limit) is full; the transaction was rolled back."""

    exit_code = 1
    code = "disk_full"


class SessionNotFoundError(HermesStoreError, LookupError):
    exit_code = 3
    code = "not_found"

    def __init__(self, ref: str, reason: str | None = None):
        super().__init__(reason or f"no session matches {ref!r}")
        self.ref = ref


class AmbiguousSessionError(HermesStoreError, LookupError):
    exit_code = 4
    code = "ambiguous_id"

    def __init__(self, ref: str, candidates: list[str],
                 candidate_rows: list[dict[str, object]] | None = None, *,
                 total: int | None = None):
        # ``candidates`` may be the first few of ``total`` matches.
        count = max(total or 0, len(candidates))
        shown = "" if count == len(candidates) else f" (the first {len(candidates)} below)"
        super().__init__(f"{ref!r} matches {count} sessions{shown}; give more characters")
        self.total = count
        self.ref = ref
        self.candidates = candidates
        # id, title and raw last_active of each candidate, for a caller to show.
        self.candidate_rows = candidate_rows or []


class UsageError(HermesStoreError, ValueError):
    """Bad command-line input: an unparsable AGE/TIME, an empty time window, contradictory bounds."""

    exit_code = 2
    code = "usage"


class OutputExistsError(HermesStoreError, FileExistsError):
    """An export target already exists and ``force`` was not given."""

    exit_code = 1
    code = "output_exists"

    def __init__(self, path: str):
        super().__init__(f"{path} already exists (use --force to overwrite)")
        self.path = path


class StoreReplacedError(HermesStoreError, sqlite3.OperationalError):
    """The store's file was deleted or replaced under an open process; the write was refused."""

    exit_code = 1
    code = "replaced"


class SearchIndexDamagedError(StoreDamagedError, sqlite3.OperationalError):
    """A derived search index cannot answer truthfully: FTS5 refuses to open it, reads a
    damaged page, or a probe found it missing rows it must hold (docs/search.md#damage).

    The messages are not part of it: ``hermes-store repair`` rebuilds the index from them.
    ``indexes`` names the indexes concerned, when known. Still an ``sqlite3.OperationalError``
    (a ``DatabaseError``), which is what a v11 caller saw for the same failure.
    """

    def __init__(self, message: str, *, indexes: tuple[str, ...] = ()):
        super().__init__(message)
        self.indexes = tuple(indexes)


class SearchIndexMissingError(SearchIndexDamagedError):
    """A search-index table is gone while statements (usually its triggers) still use it.

    Derived damage that ``repair`` fixes; still an ``sqlite3.OperationalError``, which is what
    the same failure raised before it had a name.
    """


class AgentTokenizerError(HermesStoreError, sqlite3.OperationalError):
    """The agent's own CJK search objects are in the store and this process has not loaded their
    tokenizer (``cjk_unicode61``): their triggers make every write to ``messages`` fail, so the
    write is refused and rolled back. Reads and searches keep working. The way out is a Python
    whose sqlite3 can load extensions (the library is found at ``$HERMES_FTS5_CJK_SO``, else
    ``$HERMES_HOME/lib/libfts5_cjk.so``), or ``hermes-store repair --drop-agent-cjk``
    (docs/mixed-fleets.md#the-agents-cjk-tokenizer)."""

    exit_code = 1
    code = "agent_tokenizer"


class TitleInUseError(HermesStoreError, ValueError):
    """A rename to a title another session holds (titles are unique)."""

    exit_code = 1
    code = "title_in_use"

    def __init__(self, title: str, holder: str):
        super().__init__(f"title {title!r} is already used by session {holder}")
        self.title = title
        self.holder = holder


class PlanChangedError(HermesStoreError):
    """The store changed between a destructive command's preview and its write; nothing was
    written, so a confirmation never covers what the user did not see."""

    exit_code = 1
    code = "changed_since_preview"


class StoreUnavailableError(HermesStoreError, sqlite3.OperationalError):
    """The database server cannot be reached (down, refusing, or rejecting our login).

    The message names the host and the database, never the password.
    """

    exit_code = 9
    code = "unavailable"

    def __init__(self, message: str, *, host: str | None = None, database: str | None = None):
        super().__init__(message)
        self.host = host
        self.database = database


class StoreReadOnlyError(HermesStoreError, sqlite3.OperationalError):
    """A write reached a store that serves reads only: a PostgreSQL hot standby, or a store
    opened read-only. Nothing was written; the message says where writes go instead."""

    exit_code = 1
    code = "read_only"


class PoolerError(HermesStoreError, sqlite3.OperationalError):
    """The server lost track of a connection's prepared statements, or a statement's parameters
    met another client's statement: the mark of a connection pooler (pgbouncer before 1.21 in
    transaction mode) carrying prepared statements it cannot follow. The message names the
    cause and the URL option that avoids it."""

    exit_code = 1
    code = "pooler"


class BackendNotSupportedError(HermesStoreError, NotImplementedError):
    """The operation exists for one backend only (for example, file maintenance on SQLite)."""

    exit_code = 2
    code = "unsupported_backend"


class StoreIntegrityError(HermesStoreError, sqlite3.IntegrityError):
    """A constraint refused the write on a database server; worded as SQLite words it
    ("FOREIGN KEY constraint failed", …) so callers written for either backend match one text."""

    exit_code = 1
    code = "integrity"


class OutputError(HermesStoreError, OSError):
    """A file or stream could not be written: a full disk, a read-only or missing directory, a
    path through a regular file. The message names the target the caller gave."""

    exit_code = 1
    code = "cannot_write"

    @classmethod
    def writing(cls, target: object, err: OSError) -> OutputError:
        """The error for a failed write to ``target``, naming it rather than a temporary file."""
        if isinstance(err, (FileExistsError, NotADirectoryError)) and err.filename:
            return cls(f"cannot write {target}: {err.filename} is not a directory")
        return cls(f"cannot write {target}: {err.strerror or err}")


class InputNotFoundError(HermesStoreError, FileNotFoundError):
    """A file named on the command line (to import, to verify) does not exist."""

    exit_code = 3
    code = "not_found"


class TargetNotEmptyError(HermesStoreError):
    """``copy`` was pointed at a store that holds data and is not a copy in progress of the
    same source; nothing was written."""

    exit_code = 1
    code = "target_not_empty"


class CopyMismatchError(HermesStoreError):
    """A finished copy's verification found a table whose count or checksum differs; the
    ``report`` (an ``ops.copy.CopyReport``) says which."""

    exit_code = 1
    code = "copy_mismatch"

    def __init__(self, message: str, *, report: object = None):
        super().__init__(message)
        self.report = report


class StoreUnopenableError(HermesStoreError, sqlite3.OperationalError):
    """The store's location cannot be opened the way it was asked for: ``reason`` is
    ``directory``, ``permission`` (may not read it), ``read_only`` (a write to a file or
    directory we may not write) or ``not_sqlite`` (a file that is not an SQLite database).

    An ``sqlite3.OperationalError``, which is what "unable to open database file" was before.
    """

    exit_code = 1
    code = "cannot_open"

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


class StoreAuthError(StoreUnavailableError):
    """The database server answered and refused our login (a wrong role or password, no
    ``pg_hba.conf`` entry): fixed in the URL or on the server, not by waiting for it."""

    exit_code = 10
    code = "auth_failed"
