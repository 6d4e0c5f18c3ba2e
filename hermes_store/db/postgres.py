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
  budget instead of hanging (an append skips that round trip: the only locks it meets are
  other write units', which are short);
* readers get one ``REPEATABLE READ`` snapshot per transaction, as SQLite's WAL readers do, and
  engines opened read-only make every transaction ``READ ONLY``;
* no session state outlives a transaction: isolation and read-only travel in each ``BEGIN``, so
  the store works behind a transaction-mode pooler (pgbouncer; with pgbouncer older than 1.21 add
  ``?prepare_threshold=none`` to the URL, because psycopg prepares statements it runs often);
* the pool pings a connection before lending it when it may be dead: it sat idle a second or
  more, or the server already hung up on it (a FATAL message or end-of-file waiting on its socket:
  a restart, a terminated backend). A restarted server costs one reconnect; a connection in
  steady use is not pinged, since the ping was one round trip in five of an append;
* text travels NUL-safe: every connection escapes NUL in the strings it sends and unescapes the
  text it reads (``db.dialect.escape_nul``), because PostgreSQL text cannot hold NUL;
* a server that cannot be reached is :class:`StoreUnavailableError` naming host and database,
  never the password; constraint failures are worded as SQLite words them.

psycopg is imported by SQLAlchemy when the first engine is made (the ``postgres`` extra), never
by this module, so SQLite users do not need it.
"""

from __future__ import annotations

import functools
import re
import select
import time
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, inspect, text

from hermes_store.db.dialect import NUL_ESCAPE, escape_nul, unescape_nul
from hermes_store.errors import (
    BackendNotSupportedError,
    HermesStoreError,
    StoreFullError,
    StoreIntegrityError,
    StoreAuthError,
    StoreNotFoundError,
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
_NO_DATABASE = "3D000"
_NO_DATABASE_RE = re.compile(r'database ".*" does not exist')
# A refused login (invalid_authorization_specification, invalid_password), also known by its
# words since libpq may report it without a SQLSTATE.
_AUTH_STATES = ("28000", "28P01")
_AUTH_RE = re.compile(r'password authentication failed|authentication failed for user'
                      r'|role ".*" does not exist|no pg_hba\.conf entry')
_LOCK_TIMEOUT = text("SELECT set_config('lock_timeout', :ms, true)")
_INTEGRITY_WORDS = {"23503": "FOREIGN KEY", "23505": "UNIQUE", "23502": "NOT NULL",
                    "23514": "CHECK"}


# --------------------------------------------------------------------------- engines


def make_engine(location: StoreLocation, readonly: bool) -> Engine:
    url = location.url
    connect_args: dict[str, Any] = {}
    if "prepare_threshold" in url.query:
        raw = str(url.query["prepare_threshold"]).strip().lower()
        connect_args["prepare_threshold"] = None if raw in ("", "none", "off") else int(raw)
        url = url.difference_update_query(["prepare_threshold"])
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
    engine.info = {"location": location, "readonly": readonly}  # type: ignore[attr-defined]
    event.listen(engine, "connect", _nul_safe_text)
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
    return engine.info["location"]  # type: ignore[attr-defined,no-any-return]


def connect(engine: Engine) -> Connection:
    """A pooled connection, or :class:`StoreUnavailableError` naming where we tried."""
    try:
        return engine.connect()
    except exc.DBAPIError as err:
        raise unreachable(location_of(engine), err) from err


def unreachable(location: StoreLocation, err: BaseException) -> HermesStoreError:
    inner = err.orig if isinstance(err, exc.DBAPIError) and err.orig is not None else err
    reason = _first_line(inner)
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


def unwrap(err: BaseException, location: StoreLocation) -> BaseException:
    """What our callers are promised instead of a driver error (see ``engine.unwrap``)."""
    inner = _driver_error(err)
    if isinstance(inner, HermesStoreError):
        return inner
    state = getattr(inner, "sqlstate", None)
    lost = isinstance(err, exc.DBAPIError) and err.connection_invalidated
    if lost or (state or "").startswith(_CONNECTION_CLASS):
        return unreachable(location, err)
    if state in _INTEGRITY_WORDS:
        return StoreIntegrityError(_integrity_message(state, inner))
    if state == _DISK_FULL:
        return StoreFullError(f"the database server's disk is full; the write was rolled back "
                              f"({_first_line(inner)})")
    if "cannot contain NUL" in str(inner):
        return ValueError(f"{_first_line(inner)}: this value cannot be stored on PostgreSQL")
    return inner


def _integrity_message(state: str, err: BaseException) -> str:
    diag = getattr(err, "diag", None)
    table = getattr(diag, "table_name", None)
    column = getattr(diag, "column_name", None)
    detail = getattr(diag, "message_detail", None) or _first_line(err)
    where = f"{table}.{column}" if table and column else getattr(diag, "constraint_name", None)
    head = f"{_INTEGRITY_WORDS[state]} constraint failed" + (f": {where}" if where else "")
    return f"{head} ({detail})"


def begin_write(conn: Connection, isolation: str, lock_wait_s: float) -> None:
    """First statement of a write transaction: bound its lock waits (transaction-local)."""
    if isolation != READ_COMMITTED:  # set_config(…, true) is SET LOCAL with a bound value
        conn.execute(_LOCK_TIMEOUT, {"ms": str(max(1, int(lock_wait_s * 1000)))})


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
    column = next(c for c in inspect(conn).get_columns("alembic_version")
                  if c["name"] == "version_num")
    length = getattr(column["type"], "length", None)
    if length is not None and length < 255:
        conn.execute(text(_WIDEN_VERSION))


def lock_for_migration(conn: Connection) -> None:
    """Serialise concurrent upgrades: held until the upgrade transaction ends (a transaction
    lock, so a pooler can hand the connection on afterwards)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
