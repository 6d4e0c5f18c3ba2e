"""The PostgreSQL connection policy of hermes_store (``db.engine`` dispatches here).

What SQLite gets from one file and one write lock, a server gets from transactions:

* every write unit is one transaction, ``SERIALIZABLE`` by default so that read-then-write units
  (retention, titles, clearing) behave exactly as under SQLite's single writer; units made only
  of atomic statements (an append: INSERT, then ``UPDATE … SET n = n + 1``) run at
  ``READ COMMITTED`` and never conflict at all;
* serialization failures (40001), deadlocks (40P01) and lock timeouts (55P03) roll the unit back
  and retry it within the same time budgets as SQLite lock errors (``db.engine`` owns the loop);
  a serializable unit waits for a lock at most as long as SQLite's busy timeout (``SET LOCAL
  lock_timeout``), so a transaction that holds rows for minutes makes it give up within its
  budget instead of hanging; an append's lock waits and statements are bounded by what is left
  of its budget (``lock_timeout`` and ``statement_timeout``, sent in the message that begins
  the transaction: no round trip of their own), since a table another session holds
  (``LOCK TABLE``) would otherwise stall the agent's turn for as long;
* readers get one ``REPEATABLE READ`` snapshot per transaction, as SQLite's WAL readers do, and
  engines opened read-only make every transaction ``READ ONLY``; a reader waits for a lock at
  most ``db.engine.READ_BUDGET_S`` (its statements are not bounded: exports and copies read long);
* a statement canceled by a timeout (ours or the URL's) or a lock not granted in time is
  :class:`StoreBusyError`, at connect time too (not "cannot reach": the server answered);
* no session state outlives a transaction: isolation and read-only travel in each ``BEGIN``, so
  the store works behind a transaction-mode pooler (pgbouncer);
* each new connection learns what it reached (:func:`_probe_role`, one round trip): through a
  pooler, psycopg's prepared statements are switched off (pgbouncer older than 1.21 hands a
  client's statements to other clients' server connections); on a hot standby, writes are
  refused as :class:`StoreReadOnlyError` (docs/scale-out.md#pooling, #read-replicas);
* the pool pings a connection before lending it when it may be dead: it sat idle a second or
  more, or the server already hung up on it (a FATAL message or end-of-file waiting on its socket:
  a restart, a terminated backend). A restarted server costs one reconnect; a connection in
  steady use is not pinged, since the ping was one round trip in five of an append;
* text travels NUL-safe: every connection escapes NUL in the strings it sends and unescapes the
  text it reads (``db.dialect.escape_nul``), because PostgreSQL text cannot hold NUL;
* a server that cannot be reached is :class:`StoreUnavailableError` naming host and database,
  never the password; constraint failures are worded as SQLite words them;
* one engine per URL per process, and its pool is closed when the last ``SessionDB`` on it
  closes (:func:`release`): a process that opens one store per tenant or per test would
  otherwise keep a server connection for each until the server refuses more clients.

psycopg is imported by SQLAlchemy when the first engine is made (the ``postgres`` extra), never
by this module, so SQLite users do not need it.
"""

from __future__ import annotations

import functools
import re
import select
import threading
import time
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, text

from hermes_store.db import catalog, distribution, engine_info
from hermes_store.db.dialect import NUL_ESCAPE, escape_nul, unescape_nul
from hermes_store.errors import (
    BackendNotSupportedError,
    HermesStoreError,
    PoolerError,
    StoreAuthError,
    StoreBusyError,
    StoreFullError,
    StoreIntegrityError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from hermes_store.paths import StoreLocation

WRITE_ISOLATION = "SERIALIZABLE"
READ_COMMITTED = "READ COMMITTED"
READ_ISOLATION = "REPEATABLE READ"
CONNECT_TIMEOUT_S = 10
# A connection idle in the pool this long is pinged before it is lent (a firewall or a pooler
# may have dropped it without a word); one in steady use only when its socket has input.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "hermes_idle_since"
POOL_SIZE, MAX_OVERFLOW = 5, 10
RETRYABLE = {"40001": "serialization failure", "40P01": "deadlock", "55P03": "lock timeout"}
# Any key works as long as every hermes_store process uses the same one: "hermes" in ASCII.
MIGRATION_LOCK_KEY = 0x6865726D6573
_CONNECTION_CLASS = "08"
_DISK_FULL = "53100"
_READ_ONLY = "25006"
_NOT_SUPPORTED = "0A000"
# Values the server refuses that the library's own checks (content.check_key, check_integer)
# keep out of ordinary calls: an index row too large, a sum past bigint. Bad input, not a fault.
_VALUE_LIMITS = {"54000": "a value is too large for the server to index",
                 "22003": "a number is out of range for a 64-bit integer"}
_NO_DATABASE = "3D000"
_NO_DATABASE_RE = re.compile(r'database ".*" does not exist')
# A unit's bounds travel in the message that begins it (:func:`bound_unit`): ``BEGIN …`` and a
# ``set_config(…, true)`` (SET LOCAL) sent as one simple query, one round trip where psycopg's
# own ``BEGIN`` and a bound statement after it took two (a third of a short read or append).
# The values are integers we format, never text from a caller. A shorter ``statement_timeout``
# the session already has (from the URL's ``options``) is kept: the caller asked for it.
_BOUNDS = (
    "SELECT set_config('lock_timeout', '{lock_ms}', true), set_config('statement_timeout', "
    "CASE WHEN s.ms > 0 AND s.ms < {statement_ms} THEN CAST(s.ms AS text) "
    "ELSE '{statement_ms}' END, true) "
    "FROM (SELECT CAST(extract(epoch FROM CAST(current_setting('statement_timeout') AS interval))"
    " * 1000 AS bigint) AS ms) AS s")
_LOCK_BOUND = "SELECT set_config('lock_timeout', '{lock_ms}', true)"
_QUERY_CANCELED = "57014"
_LOCK_NOT_AVAILABLE = "55P03"
# A refused login (invalid_authorization_specification, invalid_password), also known by its
# words since libpq may report it without a SQLSTATE.
_AUTH_STATES = ("28000", "28P01")
_AUTH_RE = re.compile(r'password authentication failed|authentication failed for user'
                      r'|role ".*" does not exist|no pg_hba\.conf entry')
_INTEGRITY_WORDS = {"23503": "FOREIGN KEY", "23505": "UNIQUE", "23502": "NOT NULL",
                    "23514": "CHECK"}


# --------------------------------------------------------------------------- engines

_registry_lock = threading.Lock()
_engines: dict[tuple[str, bool], Engine] = {}
_HOLDERS = "hermes_holders"


def open_engine(location: StoreLocation, readonly: bool) -> Engine:
    """The process-wide engine of a server store (one per URL and mode)."""
    key = (location.url.render_as_string(hide_password=False), readonly)
    with _registry_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = make_engine(location, readonly)
    return engine


def hold(engine: Engine) -> None:
    """A ``SessionDB`` opened on ``engine``; each :func:`release` ends one such hold."""
    with _registry_lock:
        info = engine_info.info_of(engine)
        info[_HOLDERS] = info.get(_HOLDERS, 0) + 1


def release(engine: Engine) -> None:
    """A ``SessionDB`` on ``engine`` closed: when it was the last, close the pool's connections
    and forget the engine (a later open makes a new one). Connections lent out at that moment
    close when they come back."""
    with _registry_lock:
        info = engine_info.info_of(engine)
        left = max(info.get(_HOLDERS, 0) - 1, 0)
        info[_HOLDERS] = left
        if left:
            return
        for key in [k for k, e in _engines.items() if e is engine]:
            del _engines[key]
    engine.dispose()


def dispose_all() -> None:
    with _registry_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def make_engine(location: StoreLocation, readonly: bool) -> Engine:
    url, connect_args, prepare_chosen = _prepare_threshold(location.url)
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in url.query:
        connect_args["application_name"] = "hermes-store"
    connect_args["client_encoding"] = "utf8"
    options: dict[str, Any] = {"postgresql_readonly": True} if readonly else {}
    try:
        # Readers' isolation is the connections' own (``engine.reading`` sets none); every write
        # unit names its own (``begin_write``'s caller), and it is put back on return.
        engine = create_engine(url, pool_pre_ping=False, pool_size=POOL_SIZE,
                               max_overflow=MAX_OVERFLOW, connect_args=connect_args,
                               execution_options=options, isolation_level=READ_ISOLATION)
    except ModuleNotFoundError as err:
        raise BackendNotSupportedError(
            f"{location.display}: PostgreSQL support needs psycopg 3; install it with "
            "pip install 'hermes-store[postgres]'") from err
    info = engine_info.attach(engine, {"location": location, "readonly": readonly})
    event.listen(engine, "connect", _nul_safe_text)
    event.listen(engine, "first_connect", functools.partial(distribution.note, engine.dialect))
    event.listen(engine, "connect", functools.partial(_probe_role, info, prepare_chosen))
    event.listen(engine, "checkin", _idle_from_now)
    event.listen(engine, "checkout", functools.partial(_lend, engine.dialect))
    return engine


def _idle_from_now(dbapi_conn: Any, record: Any) -> None:
    record.info[_IDLE_SINCE] = time.monotonic()


def _lend(dialect: Any, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    """Ping a connection about to be lent if it may be dead; a dead one is replaced by the pool
    (``DisconnectionError``: it reconnects and lends the new connection)."""
    since = record.info.get(_IDLE_SINCE)
    if since is None:  # just connected
        return
    if time.monotonic() - since < PING_AFTER_IDLE_S and not _server_spoke(dbapi_conn):
        return
    try:
        dialect.do_ping(dbapi_conn)
    except Exception as err:  # noqa: BLE001 - any failure: this connection is not usable
        raise exc.DisconnectionError(f"stale connection: {_first_line(err)}") from err


def _server_spoke(dbapi_conn: Any) -> bool:
    """True when an idle connection has input waiting: between transactions a server sends
    nothing unasked except its last words (a FATAL message, then end-of-file)."""
    if dbapi_conn.closed or dbapi_conn.broken:
        return True
    poller = select.poll()
    poller.register(dbapi_conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def _nul_safe_text(dbapi_conn: Any, _record: Any) -> None:
    from psycopg.adapt import Dumper, Loader  # the postgres extra: present once connected

    class NulSafeStr(Dumper):
        """A str parameter, NUL escaped; sent untyped as psycopg's own str dumper does."""

        def dump(self, obj: str) -> bytes:
            return escape_nul(obj).encode()

    class NulSafeText(Loader):
        def load(self, data: Any) -> str:
            # The check inline: a search page reads ~200 values through here.
            text = bytes(data).decode()
            return text if NUL_ESCAPE not in text else unescape_nul(text)

    dbapi_conn.adapters.register_dumper(str, NulSafeStr)
    for oid_name in ("text", "varchar"):
        dbapi_conn.adapters.register_loader(oid_name, NulSafeText)


def location_of(engine: Engine) -> StoreLocation:
    location = engine_info.info_of(engine)["location"]
    if not isinstance(location, StoreLocation):
        raise TypeError(f"{engine!r} carries no StoreLocation")
    return location


def connect(engine: Engine) -> Connection:
    """A pooled connection, or :class:`StoreUnavailableError` naming where we tried."""
    try:
        return engine.connect()
    except exc.DBAPIError as err:
        raise unreachable(location_of(engine), err) from err


def unreachable(location: StoreLocation, err: BaseException) -> HermesStoreError:
    inner = err.orig if isinstance(err, exc.DBAPIError) and err.orig is not None else err
    reason = _first_line(inner)
    if getattr(inner, "sqlstate", None) in (_QUERY_CANCELED, _LOCK_NOT_AVAILABLE):
        # The server answered: a first statement ran past a timeout (a tiny statement_timeout
        # in the URL's options), which is no reason to say it cannot be reached.
        return _out_of_time(location, inner)
    # libpq reports a failed login without a SQLSTATE: a missing database is known by its words.
    if getattr(inner, "sqlstate", None) == _NO_DATABASE or _NO_DATABASE_RE.search(reason):
        return StoreNotFoundError(
            f"{location.display}: the server has no database {location.database!r} "
            f"(create it first, e.g. `createdb {location.database}`)")
    port = location.url.port or 5432
    if getattr(inner, "sqlstate", None) in _AUTH_STATES or _AUTH_RE.search(reason):
        return StoreAuthError(
            f"the PostgreSQL server {location.host}:{port} refused the login to "
            f"{location.database!r}: {reason} (check the user and password in the URL)",
            host=location.host, database=location.database)
    return StoreUnavailableError(
        f"cannot reach the PostgreSQL database {location.database!r} on "
        f"{location.host}:{port}: {reason}", host=location.host, database=location.database)


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


# --------------------------------------------------------------------------- errors


def _driver_error(err: BaseException) -> BaseException:
    return err.orig if isinstance(err, exc.DBAPIError) and err.orig is not None else err


def sqlstate(err: BaseException) -> str | None:
    return getattr(_driver_error(err), "sqlstate", None)


def is_retryable(err: BaseException) -> bool:
    return sqlstate(err) in RETRYABLE


def is_driver_error(err: BaseException) -> bool:
    return isinstance(err, exc.DBAPIError) or hasattr(err, "sqlstate")


def unwrap(err: BaseException, location: StoreLocation,
           role: dict[str, Any] | None = None) -> BaseException:
    """What our callers are promised instead of a driver error (see ``engine.unwrap``);
    ``role`` is the engine's ``info`` (what its connections reached)."""
    inner = _driver_error(err)
    if isinstance(inner, HermesStoreError):
        return inner
    state = getattr(inner, "sqlstate", None)
    role = role or {}
    if state in _POOLER_STATES:
        return _pooler_refusal(location, inner, bool(role.get(_POOLED)))
    if state == _READ_ONLY or (state == _NOT_SUPPORTED and "hot standby" in str(inner)):
        return _read_only_refusal(location, inner, bool(role.get(_STANDBY)))
    lost = isinstance(err, exc.DBAPIError) and err.connection_invalidated
    if lost or (state or "").startswith(_CONNECTION_CLASS):
        return unreachable(location, err)
    if state in _INTEGRITY_WORDS:
        return StoreIntegrityError(_integrity_message(state, inner))
    if state == _DISK_FULL:
        return StoreFullError(f"the database server's disk is full; the write was rolled back "
                              f"({_first_line(inner)})")
    if state in (_QUERY_CANCELED, _LOCK_NOT_AVAILABLE):
        return _out_of_time(location, inner)
    if state in _VALUE_LIMITS:
        return ValueError(f"{_VALUE_LIMITS[state]} ({_first_line(inner)}); nothing was written")
    if "cannot contain NUL" in str(inner):
        return ValueError(f"{_first_line(inner)}: this value cannot be stored on PostgreSQL")
    return inner


def translate(engine: Engine, err: BaseException) -> BaseException:
    """:func:`unwrap` for an error raised on ``engine``'s connections."""
    return unwrap(err, location_of(engine), engine_info.info_of(engine))
def _out_of_time(location: StoreLocation, err: BaseException) -> StoreBusyError:
    """A statement past its budget (ours, or a ``statement_timeout`` the URL sets) or a lock not
    granted in time: the transaction was rolled back, nothing was written."""
    if getattr(err, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
        what = "waiting for a lock another session holds"
    else:
        what = "a statement ran past its time budget or the server's statement_timeout"
    return StoreBusyError(f"database is locked: {what} on {location.display}; nothing was "
                          f"written ({_first_line(err)})")


def _integrity_message(state: str, err: BaseException) -> str:
    diag = getattr(err, "diag", None)
    table = getattr(diag, "table_name", None)
    column = getattr(diag, "column_name", None)
    detail = getattr(diag, "message_detail", None) or _first_line(err)
    where = f"{table}.{column}" if table and column else getattr(diag, "constraint_name", None)
    head = f"{_INTEGRITY_WORDS[state]} constraint failed" + (f": {where}" if where else "")
    return f"{head} ({detail})"


def bound_unit(conn: Connection, *, lock_wait_s: float, budget_s: float | None) -> None:
    """Begin the transaction of ``conn``: no lock wait past ``lock_wait_s`` and no statement
    past ``budget_s`` (what is left of the unit's time budget; None: no bound of ours), so a
    table held by another session (``LOCK TABLE``, a long migration) ends in
    :class:`StoreBusyError`, not a hang. Called before the unit's first statement."""
    if budget_s is None:
        bounds = _LOCK_BOUND.format(lock_ms=_ms(lock_wait_s))
    else:
        bounds = _BOUNDS.format(lock_ms=_ms(min(lock_wait_s, budget_s)),
                                statement_ms=_ms(budget_s))
    driver = conn.connection.driver_connection
    if driver is None or driver.info.transaction_status != _IDLE:
        conn.exec_driver_sql(bounds)  # a transaction already open: the bounds alone
        return
    begin = f"{_begin_of(driver)}; {bounds}"
    result = driver.pgconn.exec_(begin.encode())  # simple query: several statements, one trip
    if result.status in (_COMMAND_OK, _TUPLES_OK):
        return
    from psycopg import errors as pg_errors

    err = pg_errors.error_from_result(result, encoding=driver.info.encoding)
    lost = driver.pgconn.status != _CONNECTION_OK
    if lost:
        conn.invalidate(err)
    # Wrapped as SQLAlchemy wraps a statement's error, so the unit's handling is the same (a
    # canceled bound is StoreBusyError, a lost server StoreUnavailableError).
    raise exc.DBAPIError.instance(begin, None, err, pg_errors.Error, connection_invalidated=lost)


# libpq's codes (psycopg.pq's enums hold the same numbers; read here without importing psycopg).
_IDLE, _COMMAND_OK, _TUPLES_OK, _CONNECTION_OK = 0, 1, 2, 0


def _begin_of(driver: Any) -> str:
    """The ``BEGIN`` psycopg would send for ``driver``'s settings (isolation, read-only)."""
    words = ["BEGIN"]
    if driver.isolation_level is not None:
        words.append("ISOLATION LEVEL " + driver.isolation_level.name.replace("_", " "))
    if driver.read_only is not None:
        words.append("READ ONLY" if driver.read_only else "READ WRITE")
    if driver.deferrable is not None:
        words.append("DEFERRABLE" if driver.deferrable else "NOT DEFERRABLE")
    return " ".join(words)


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))


def begin_write(conn: Connection, isolation: str, lock_wait_s: float, budget_s: float) -> None:
    """First statement of a write transaction. A serializable unit waits for a lock at most
    ``lock_wait_s`` and is retried (the rows it reads may be held for long); it may run long
    statements (an upgrade, an import), so its statements are not bounded. An append (atomic
    statements, ``READ COMMITTED``) is bounded whole by what is left of its budget."""
    if isolation != READ_COMMITTED:
        bound_unit(conn, lock_wait_s=lock_wait_s, budget_s=None)
    else:
        bound_unit(conn, lock_wait_s=budget_s, budget_s=budget_s)


def gave_up(what: str, elapsed: float, attempts: int, err: BaseException) -> str:
    state = sqlstate(err)
    if state == "55P03":  # worded as SQLite words it: callers match "database is locked"
        return (f"database is locked: {what} gave up after {elapsed:.1f}s ({attempts} attempts);"
                " another transaction holds the rows it writes")
    return (f"{what} gave up after {elapsed:.1f}s ({attempts} attempts): concurrent transactions "
            f"kept conflicting with it (last: {RETRYABLE.get(state or '', 'conflict')})")


# --------------------------------------------------------------------------- maintenance


def vacuum(engine: Engine) -> None:
    """``VACUUM (ANALYZE)``: outside any transaction, as PostgreSQL requires."""
    with connect(engine) as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM (ANALYZE)")


# Alembic creates ``alembic_version.version_num`` as VARCHAR(32): SQLite never enforces the
# length, PostgreSQL does, and a revision id may be longer (0019_index_triggers_take_agent_names
# is 36). The table is made, or widened, before Alembic looks for it (idempotent, in the
# upgrade's transaction behind the migration lock).
_VERSION_TABLE = ("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(255) NOT NULL, "
                  "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))")
_WIDEN_VERSION = "ALTER TABLE alembic_version ALTER COLUMN version_num TYPE VARCHAR(255)"


def prepare_version_table(conn: Connection) -> None:
    """Leave ``alembic_version`` able to hold any of our revision ids."""
    conn.execute(text(_VERSION_TABLE))
    column = catalog.column_details(conn, "alembic_version")["version_num"]
    length = getattr(column["type"], "length", None)
    if length is not None and length < 255:
        conn.execute(text(_WIDEN_VERSION))


def lock_for_migration(conn: Connection) -> None:
    """Serialise concurrent upgrades: held until the upgrade transaction ends (a transaction
    lock, so a pooler can hand the connection on afterwards)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


# --------------------------------------------------------------------------- what we reached
# Where a connection lands decides two things the URL does not say: whether prepared statements
# are safe (not through a pooler that may hand the next statement to another server connection)
# and whether writes can work (not on a hot standby). Each new connection asks once.

_ROLE_PROBE = "SELECT pg_backend_pid(), pg_is_in_recovery()"
_STANDBY = "standby"
_POOLED = "pooled"
# psycopg's default: a statement run this often on one connection is prepared.
PREPARE_THRESHOLD = 5


def _prepare_threshold(url: Any) -> tuple[Any, dict[str, Any], bool]:
    """The URL without our ``prepare_threshold`` option, the connect arguments it sets, and
    whether the user chose it (then no probe result overrides it)."""
    if "prepare_threshold" not in url.query:
        return url, {}, False
    raw = str(url.query["prepare_threshold"]).strip().lower()
    threshold = None if raw in ("", "none", "off") else int(raw)
    return (url.difference_update_query(["prepare_threshold"]),
            {"prepare_threshold": threshold}, True)


def _probe_role(info: dict[str, Any], prepare_chosen: bool, dbapi_conn: Any,
                _record: Any) -> None:
    """Learn whether this connection goes through a pooler and reaches a standby.

    A server announces its backend's pid when the connection starts (libpq keeps it for
    cancel requests); a pooler answers the start itself and announces a key of its own, so the
    pid the session reports differs. That holds for any pooler that multiplexes (pgbouncer,
    pgcat, odyssey) whatever its host or port, and never for a direct connection."""
    pid, in_recovery = dbapi_conn.execute(_ROLE_PROBE).fetchone()
    dbapi_conn.rollback()
    pooled = pid != dbapi_conn.info.backend_pid
    info[_POOLED] = pooled
    info[_STANDBY] = bool(in_recovery)
    if pooled and not prepare_chosen:
        dbapi_conn.prepare_threshold = None


def through_pooler(engine: Engine) -> bool:
    """Whether the engine's connections go through a connection pooler (known once one
    connected)."""
    _learn(engine)
    return bool(engine_info.info_of(engine).get(_POOLED))


def is_standby(engine: Engine) -> bool:
    """Whether the server is a hot standby (in recovery): it serves reads only."""
    _learn(engine)
    return bool(engine_info.info_of(engine).get(_STANDBY))


def _learn(engine: Engine) -> None:
    if _STANDBY not in engine_info.info_of(engine):
        with connect(engine):
            pass


def refuse_on_standby(engine: Engine, what: str) -> None:
    """Raise for a write-only operation (an upgrade) pointed at a standby."""
    if is_standby(engine):
        raise StoreReadOnlyError(
            f"{what} must run on the primary: {location_of(engine).display} is a hot standby "
            "(read-only; it replays the primary's changes, schema changes included)")


def _read_only_refusal(location: StoreLocation, inner: BaseException,
                       standby: bool) -> StoreReadOnlyError:
    if standby:
        return StoreReadOnlyError(
            f"{location.display} is a hot standby, which serves reads only: write through the "
            f"primary ({_first_line(inner)})")
    return StoreReadOnlyError(f"{location.display} was opened read-only; nothing was written "
                              f"({_first_line(inner)})")


# SQLSTATEs a pooler that cannot follow prepared statements produces: a statement prepared on
# one server connection is missing (26000) or already there (42P05) on the next, or its
# parameters are another client's (08P01, "bind message supplies N parameters").
_POOLER_STATES = {"26000": "prepared statement missing", "42P05": "prepared statement exists",
                  "08P01": "protocol violation"}


def _pooler_refusal(location: StoreLocation, inner: BaseException, pooled: bool) -> PoolerError:
    where = ("the connection goes through a pooler" if pooled
             else "a pooler may sit between us and the server")
    return PoolerError(
        f"{location.display}: the server lost track of this connection's prepared statements "
        f"({_POOLER_STATES[getattr(inner, 'sqlstate', '')]}: {_first_line(inner)}); {where}. "
        "pgbouncer before 1.21 in transaction mode cannot carry prepared statements: remove "
        "prepare_threshold from the URL (hermes-store turns them off behind a pooler it "
        "detects) or add ?prepare_threshold=none")
