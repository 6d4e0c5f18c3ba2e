"""How hermes_store talks to its database: the one SQLite connection policy, and the public
functions (``open_engine``, ``reading``, ``run_write`` …) that dispatch to ``db.postgres`` for a
PostgreSQL store, so that nothing above this layer branches on the backend.

Everything about how we talk to the file lives here, for the facade, the CLI, Alembic, tests:

* one Engine per file per process (a registry), so a process never contends with itself;
* pysqlite's implicit transaction handling is switched off and we emit ``BEGIN`` ourselves:
  DDL becomes transactional (a failed revision leaves nothing behind) and writers can say
  ``BEGIN IMMEDIATE``, taking the write lock before doing any work;
* writers of this library queue for the write lock in order (``writer_queue``): a blocking OS
  lock on the sidecar ``<store>-writer.lock``, taken before ``BEGIN IMMEDIATE`` and released
  after commit or rollback, so a writer wakes the moment its predecessor is done instead of
  polling on a timer; readers never take it, and the wait is bounded by the write's budget;
* behind that, for writers outside this library and filesystems without such locks, a short
  SQLite busy timeout, then application-level retries with jitter, bounded by a time budget
  rather than an attempt count (a sibling holding the lock for seconds must not exhaust us, and
  identical back-off would make writers queue in convoys);
* WAL, ``foreign_keys=ON``, ``journal_size_limit`` 64 MiB, a PASSIVE checkpoint every 50 writes;
  ``DELETE`` journaling only where the filesystem refuses WAL's locks (the agent also calls
  :func:`apply_wal_with_fallback` on its other databases);
* new database files (and their ``-wal``/``-shm``) and the writer lock file are 0600;
* each connection loads the agent's CJK tokenizer where it is installed and loadable;
* opening an existing store writes nothing: the pragmas used are per-connection, and the journal
  mode is only changed when it is not WAL already.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from hermes_store.db import connection_policy, engine_info, identity, postgres, writer_queue

# ``X as X``: the policy and the driver helpers, re-exported from their old home here.
from hermes_store.db.connection_policy import BUSY_TIMEOUT_S as BUSY_TIMEOUT_S
from hermes_store.db.connection_policy import JOURNAL_SIZE_LIMIT as JOURNAL_SIZE_LIMIT
from hermes_store.db.connection_policy import _wal_warned as _wal_warned
from hermes_store.db.connection_policy import apply_wal_with_fallback as apply_wal_with_fallback
from hermes_store.db.sqlite_driver import dbapi_of
from hermes_store.db.sqlite_driver import decode_text as decode_text
from hermes_store.db.sqlite_driver import is_full_error as is_full_error
from hermes_store.db.sqlite_driver import is_lock_error as is_lock_error
from hermes_store.db.sqlite_driver import is_malformed_db_error as is_malformed_db_error
from hermes_store.db.sqlite_driver import load_agent_tokenizer as load_agent_tokenizer
from hermes_store.db.sqlite_driver import unwrap as unwrap
from hermes_store.errors import BackendNotSupportedError, StoreBusyError
from hermes_store.paths import StoreLocation, open_problem, require_parent, resolve_location

log = logging.getLogger(__name__)

WRITE_BUDGET_S = 20.0
APPEND_BUDGET_S = 60.0
# How long a read transaction may wait for a lock on a database server (a file's readers never
# wait); the budgets are module attributes so that a caller (or a test) can shorten them.
READ_BUDGET_S = 20.0
MIN_ATTEMPTS = 15
RETRY_MIN_S, RETRY_MAX_S = 0.020, 0.150
SLOW_RETRY_MIN_S, SLOW_RETRY_MAX_S = 0.25, 1.0
FAST_PHASE_S = 2.0
CHECKPOINT_EVERY_N_WRITES = 50
FILE_MODE = 0o600

# PostgreSQL isolation for write units made only of atomic statements (see db.postgres).
READ_COMMITTED = postgres.READ_COMMITTED

_BEGIN_MODES = frozenset({"DEFERRED", "IMMEDIATE", "EXCLUSIVE"})

T = TypeVar("T")


@dataclass
class _FileState:
    """Per-file, per-process state shared by every engine opened on that file."""

    write_lock: threading.RLock = field(default_factory=threading.RLock)
    writes: int = 0
    # False once the filesystem refused an OS lock: writes then rely on the busy timeout alone.
    queue_usable: bool = True
    # Writes nested in the thread holding ``write_lock``: only the outermost takes the OS lock
    # (a second flock from the same process would wait for itself).
    queue_depth: int = 0


_registry_lock = threading.Lock()
_engines: dict[tuple[str, bool], Engine] = {}
_files: dict[str, _FileState] = {}


def _file_state(path: str) -> _FileState:
    state = _files.get(path)  # every write asks: the common case takes no lock, builds nothing
    if state is not None:
        return state
    with _registry_lock:
        return _files.setdefault(path, _FileState())


# --------------------------------------------------------------------------- opening


def _ensure_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does, so its sidecars inherit the mode."""
    require_parent(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        if not (path.is_symlink() and not path.exists()):
            return
        # A link to a file yet to exist (a dotfiles layout): O_EXCL refuses the link itself,
        # and SQLite would then create its target with the umask's mode. Create it here.
        try:
            fd = os.open(os.path.realpath(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        except FileExistsError:
            return
    os.close(fd)


def store_file_mode(engine: Engine) -> int:
    """The permission bits files made from a store's data get (exports): the store file's own
    on SQLite, never with execute bits; :data:`FILE_MODE` for a server or a file that is gone."""
    if is_server(engine):
        return FILE_MODE
    try:
        return os.stat(engine_path(engine)).st_mode & 0o666
    except OSError:
        return FILE_MODE


# The module the search indexes are built on. A constant, so that tests can name a module this
# runtime lacks and see exactly what a SQLite built without FTS5 does to an open.
FTS5_MODULE = "fts5"


def fts5_available() -> bool:
    """Whether this runtime's SQLite has FTS5, probed through the ``sqlite3.connect`` in use."""
    return _module_available(FTS5_MODULE, sqlite3.connect)


@functools.cache
def _module_available(module: str, connect: Callable[..., sqlite3.Connection]) -> bool:
    con = connect(":memory:")
    try:  # statements run on connections and cursors (and a test may swap either): probe both
        con.execute(f"CREATE VIRTUAL TABLE probe USING {module}(x)")
        con.cursor().execute(f"CREATE VIRTUAL TABLE probe2 USING {module}(x)")
        return True
    except sqlite3.Error:
        return False
    finally:
        con.close()


def _connect_factory(path: str, readonly: bool) -> Callable[[], sqlite3.Connection]:
    return functools.partial(connection_policy.connect, path, readonly)


def _install_transaction_control(engine: Engine) -> None:
    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:  # pragma: no branch - tiny
        mode = str(conn.get_execution_options().get("hermes_begin", "DEFERRED")).upper()
        if mode not in _BEGIN_MODES:
            raise ValueError(f"unknown BEGIN mode {mode!r}")
        # On the driver: a statement through SQLAlchemy costs more than BEGIN itself, and
        # errors raised here are wrapped by SQLAlchemy all the same.
        dbapi_of(conn.connection).execute(f"BEGIN {mode}")


def _make_engine(path: str, readonly: bool, location: StoreLocation) -> Engine:
    # A small pool: reusing connections keeps the WAL open between writes (closing the last
    # connection checkpoints and deletes it, which is slow and races other processes' sidecars).
    file_id = identity.of(path)
    engine = create_engine(
        f"sqlite+pysqlite:///{path}",
        creator=_connect_factory(path, readonly),
        poolclass=QueuePool,
        pool_size=4,
        max_overflow=8,
    )
    _install_transaction_control(engine)
    engine_info.attach(engine, {"path": path, "readonly": readonly,
                                "identity": file_id, "location": location})
    if not readonly:
        event.listen(engine, "connect", functools.partial(identity.note_sidecars, path))
    return engine


def open_engine(target: str | os.PathLike[str] | StoreLocation, *,
                readonly: bool = False) -> Engine:
    """The process-wide Engine for a store (a path, a URL or a :class:`StoreLocation`);
    read-write opens of a file create it (0600) if missing."""
    location = resolve_location(target)
    if location.path is None:
        return postgres.open_engine(location, readonly)
    p = location.path
    if not readonly:
        _ensure_file(p)
    key = (str(p.resolve()), readonly)
    with _registry_lock:  # closing any descriptor drops this process's POSIX locks on the file:
        held = any(k[0] == key[0] for k in _engines)  # not while our connections hold them
    if (problem := open_problem(p, write=not readonly, header=not held)) is not None:
        raise problem  # missing for a read, a directory, unreadable, read-only, not SQLite
    with _registry_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = _make_engine(key[0], readonly, location)
    return engine


def holds(path: str | os.PathLike[str]) -> bool:
    """Whether this process has an engine open on the store file at ``path``."""
    key = str(Path(path).resolve())
    with _registry_lock:
        return any(k[0] == key for k in _engines)


def is_server(engine: Engine) -> bool:
    """True for a database server (PostgreSQL), False for a SQLite file."""
    return engine.dialect.name != "sqlite"


def engine_location(engine: Engine) -> StoreLocation:
    found = engine_info.info_of(engine).get("location")
    return found if isinstance(found, StoreLocation) else StoreLocation.for_path(str(engine.url.database))


def engine_path(engine: Engine) -> str:
    """The store's file; a server has none, and file operations on it are refused plainly."""
    if is_server(engine):
        raise BackendNotSupportedError(
            f"{engine_location(engine).display} is a PostgreSQL database: this operation works "
            "on a SQLite file only")
    return str(engine.url.database)


def _connect(engine: Engine) -> Connection:
    return postgres.connect(engine) if is_server(engine) else engine.connect()


def _translate(engine: Engine, err: BaseException) -> BaseException:
    if is_server(engine):
        return postgres.translate(engine, err)
    return unwrap(err, engine_path(engine))


def forget(path: str | os.PathLike[str]) -> None:
    """Close and unregister this process's engines on ``path`` (before deleting or replacing
    the file on purpose, so a later open sees the new file instead of refusing to write)."""
    resolved = str(Path(path).expanduser().resolve())
    with _registry_lock:
        for key in [k for k in _engines if k[0] == resolved]:
            _engines.pop(key).dispose()


def dispose_all() -> None:
    """Forget every registered engine (tests, and processes that fork)."""
    with _registry_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
    postgres.dispose_all()


# --------------------------------------------------------------------------- the writers' queue


@contextlib.contextmanager
def _writer_turn(engine: Engine, state: _FileState, deadline: float) -> Iterator[None]:
    """Hold this file's place at the head of the writers' queue for one write attempt.

    The caller holds ``state.write_lock`` (threads of one process queue there first).
    """
    fd = None
    if (writer_queue.AVAILABLE and state.queue_usable and not state.queue_depth
            and not engine_info.info_of(engine).get("readonly")):
        path = engine_path(engine)
        try:
            fd = writer_queue.join(path, deadline)
        except writer_queue.NoOSLock as err:
            state.queue_usable = False
            log.warning("no OS file lock for %s (%s); writers wait on SQLite's busy timeout "
                        "alone", writer_queue.lock_path(path), err.__cause__)
    state.queue_depth += 1
    try:
        yield
    finally:
        state.queue_depth -= 1
        if fd is not None:
            writer_queue.leave(fd)


# --------------------------------------------------------------------------- writing


def _sleep_for(elapsed: float) -> float:
    if elapsed < FAST_PHASE_S:
        return random.uniform(RETRY_MIN_S, RETRY_MAX_S)
    return random.uniform(SLOW_RETRY_MIN_S, SLOW_RETRY_MAX_S)


def _busy(what: str, elapsed: float, attempts: int, message: str | None = None) -> StoreBusyError:
    return StoreBusyError(message or (
        f"database is locked: {what} gave up after {elapsed:.1f}s ({attempts} attempts); "
        "another process holds the write lock"), waited_s=elapsed, attempts=attempts)


def _retrying(engine: Engine, attempt: Callable[[], T], *, budget: float, what: str) -> T:
    """Run ``attempt()`` at the head of the writers' queue, retrying lock errors (and, on
    PostgreSQL, serialization failures and deadlocks).

    Threads of this process queue on the file's in-process lock, processes on the OS lock
    (:func:`_writer_turn`). A lock error can still come from a writer outside this library:
    each retry then waits a jittered interval (short at first, longer once a sibling has held
    the lock for a while) and never sleeps past ``budget``; then :class:`StoreBusyError` (an
    ``sqlite3.OperationalError``) says how long we waited. Other errors propagate at once, as
    the ``sqlite3`` error behind them (on PostgreSQL: our error for it, else psycopg's).
    """
    server = is_server(engine)
    state = None if server else _file_state(engine_path(engine))
    lock = contextlib.nullcontext() if state is None else state.write_lock

    # A server orders its own writers: only a file's writers queue on the OS lock.
    def turn(deadline: float) -> contextlib.AbstractContextManager[object]:
        if state is None:
            return contextlib.nullcontext()
        return _writer_turn(engine, state, deadline)

    retryable = postgres.is_retryable if server else is_lock_error
    start = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            with lock, turn(start + budget):
                return attempt()
        except writer_queue.QueueTimeout:
            raise _busy(what, time.monotonic() - start, attempts) from None
        except Exception as err:
            if not retryable(err):
                translated = _translate(engine, err)
                if translated is err:
                    raise
                raise translated from err
            elapsed = time.monotonic() - start
            if elapsed >= budget:
                message = postgres.gave_up(what, elapsed, attempts, err) if server else None
                raise _busy(what, elapsed, attempts, message) from err
            time.sleep(min(_sleep_for(elapsed), max(0.0, budget - elapsed)))


def run_write(engine: Engine, fn: Callable[[Connection], T], *, budget: float = WRITE_BUDGET_S,
              what: str = "write", isolation: str | None = None) -> T:
    """Run ``fn(connection)`` as one transaction and commit it: ``BEGIN IMMEDIATE`` on SQLite,
    on PostgreSQL ``isolation`` (default ``SERIALIZABLE``; :data:`READ_COMMITTED` for units
    made only of atomic statements, such as an append).

    On a lock error or a serialization failure the whole unit is rolled back and retried (see
    :func:`_retrying`), so ``fn`` must be safe to run again: no side effects outside the
    database.
    """
    server = is_server(engine)
    level = isolation or postgres.WRITE_ISOLATION
    deadline = time.monotonic() + budget

    def attempt() -> T:
        with _connect(engine) as conn:
            if server:
                conn = conn.execution_options(isolation_level=level)
            else:
                conn = conn.execution_options(hermes_begin="IMMEDIATE")
            with conn.begin():
                if server:
                    postgres.begin_write(conn, level, BUSY_TIMEOUT_S,
                                         max(0.001, deadline - time.monotonic()))
                else:
                    identity.check_same_files(engine_path(engine), engine_info.info_of(engine), conn)
                return fn(conn)

    result = _retrying(engine, attempt, budget=budget, what=what)
    if not server:
        _after_write(engine, _file_state(engine_path(engine)))
    return result


def lock_for_migration(conn: Connection) -> None:
    """Make concurrent upgrades of one store take turns (inside the upgrade's transaction).
    SQLite's ``BEGIN IMMEDIATE`` already does; PostgreSQL takes a transaction advisory lock."""
    if is_server(conn.engine):
        postgres.lock_for_migration(conn)


def vacuum(engine: Engine, *, budget: float = WRITE_BUDGET_S) -> None:
    """``VACUUM`` under the same lock-retry policy as every write.

    VACUUM cannot run inside a transaction, so it goes straight to the driver connection
    (which is in autocommit mode: we never let pysqlite open transactions on its own). On
    PostgreSQL: ``VACUUM (ANALYZE)``.
    """
    if is_server(engine):
        postgres.vacuum(engine)
        return

    def attempt() -> None:
        with engine.connect() as conn:
            identity.check_same_files(engine_path(engine), engine_info.info_of(engine), conn)
            dbapi_of(conn.connection).execute("VACUUM")

    _retrying(engine, attempt, budget=budget, what="vacuum")


def run_write_session(engine: Engine, fn: Callable[[Session], T], *,
                      budget: float = WRITE_BUDGET_S, what: str = "write",
                      isolation: str | None = None) -> T:
    """:func:`run_write` for ORM code: ``fn`` gets a Session joined to the write transaction."""

    def unit(conn: Connection) -> T:
        with Session(bind=conn, expire_on_commit=False) as session:
            out = fn(session)
            session.flush()
            return out

    return run_write(engine, unit, budget=budget, what=what, isolation=isolation)


def _after_write(engine: Engine, state: _FileState) -> None:
    state.writes += 1
    if state.writes % CHECKPOINT_EVERY_N_WRITES == 0:
        checkpoint(engine, "PASSIVE")


def checkpoint(engine: Engine, mode: str = "PASSIVE") -> tuple[int, int, int] | None:
    """Best-effort WAL checkpoint; returns (busy, log frames, checkpointed frames) or None
    (always None on a server, which checkpoints by itself)."""
    mode = mode.upper()
    if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
        raise ValueError(f"unknown checkpoint mode {mode!r}")
    if is_server(engine):
        return None
    try:
        with engine.connect() as conn:
            row = conn.exec_driver_sql(f"PRAGMA wal_checkpoint({mode})").fetchone()
            conn.commit()
    except exc.DBAPIError as err:
        log.debug("checkpoint %s skipped: %s", mode, err)
        return None
    return (int(row[0]), int(row[1]), int(row[2])) if row else None


@contextlib.contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A short read transaction (one snapshot); errors come back as the ``sqlite3`` classes
    callers expect."""
    server = is_server(engine)
    try:
        # On a server the engine's own isolation is the readers' (db.postgres.make_engine):
        # setting it per read, and back when the connection returned, was a third of what a
        # read transaction cost the client beyond the driver's own work.
        with _connect(engine) as conn, conn.begin():
            if server:  # lock waits only: exports and copies run long statements by design
                postgres.bound_unit(conn, lock_wait_s=READ_BUDGET_S, budget_s=None)
            yield conn
    except exc.DBAPIError as err:
        raise _translate(engine, err) from err
    except sqlite3.Error as err:
        if server:
            raise  # already one of ours (a server that cannot be reached, …)
        # Statements run on the driver connection under ``conn`` (hot read paths) raise the
        # raw class: damage must name its remedy whichever way the statement went.
        translated = unwrap(err, engine_path(engine))
        if translated is err:
            raise
        raise translated from err
    except Exception as err:
        # The same for psycopg's classes on a server.
        if not (server and postgres.is_driver_error(err)):
            raise
        translated = _translate(engine, err)
        if translated is err:
            raise
        raise translated from err


@contextlib.contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    with reading(engine) as conn, Session(bind=conn) as session:
        yield session


def sqlite_version() -> tuple[int, ...]:
    return sqlite3.sqlite_version_info
