"""The PostgreSQL policy: a server that is down, retried serialization failures, exact counters
under concurrent writers, no session state between transactions, SQLite-only operations."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from backends import closed_port, sql
from cli_support import run_json
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import postgres
from hermes_store.errors import (
    BackendNotSupportedError,
    StoreBusyError,
    StoreNotFoundError,
    StoreUnavailableError,
)

SECRET = "s3cr3t-pa55"


def _other_connection(url: str) -> Any:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database,
                           autocommit=True)


# --------------------------------------------------------------------------- unreachable


def test_a_server_that_is_down_is_a_clear_error_naming_host_and_database() -> None:
    url = f"postgresql://hermes:{SECRET}@127.0.0.1:{closed_port()}/storedb"
    with pytest.raises(StoreUnavailableError) as err:
        SessionDB(url)
    message = str(err.value)
    assert "127.0.0.1" in message and "storedb" in message and SECRET not in message
    assert (err.value.host, err.value.database) == ("127.0.0.1", "storedb")
    assert isinstance(err.value, sqlite3.OperationalError) and err.value.exit_code == 9
    code, doc = run_json("--db", url, "list")
    assert code == 9 and doc["error"]["code"] == "unavailable"
    assert "storedb" in doc["error"]["message"] and SECRET not in doc["error"]["message"]


@pytest.mark.direct_pg
def test_a_missing_database_on_a_live_server_is_not_found(pg_store: str) -> None:
    url = make_url(pg_store).set(database="hermes_no_such_db").render_as_string(False)
    with pytest.raises(StoreNotFoundError, match="hermes_no_such_db"):
        SessionDB(url)
    code, _ = run_json("--db", url, "current")
    assert code == 3


def _terminate_the_others(url: str) -> None:
    """What a server restart does to our connections; returns once their backends are gone
    (``pg_terminate_backend`` only signals them)."""
    killer = _other_connection(url)
    try:
        pids = [r[0] for r in killer.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")]
        killer.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        while killer.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                             (pids,)).fetchone()[0]:
            time.sleep(0.01)
    finally:
        killer.close()


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ping the pool sends before lending a connection."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    sent: list[int] = []
    real = PGDialect_psycopg.do_ping

    def counting(self: Any, dbapi_conn: Any) -> bool:
        sent.append(1)
        return real(self, dbapi_conn)

    monkeypatch.setattr(PGDialect_psycopg, "do_ping", counting)
    return sent


@pytest.mark.direct_pg
def test_a_dropped_connection_is_replaced_by_the_pool(pg_store: str, pings: list[int],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # However recently used: the server's last words are waiting on the socket.
    monkeypatch.setattr(postgres, "PING_AFTER_IDLE_S", 3600.0)
    with SessionDB(pg_store) as db:
        db.create_session("s1", "cli")
        _terminate_the_others(pg_store)
        db.append_message("s1", "user", "after the restart")
        assert db.get_session("s1")["message_count"] == 1
    assert pings  # the dead connection was found out before it was lent


def test_a_connection_in_steady_use_is_lent_without_a_ping(pg_store: str, pings: list[int],
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(postgres, "PING_AFTER_IDLE_S", 3600.0)
    with SessionDB(pg_store) as db:
        db.create_session("s1", "cli")
        for n in range(5):
            db.append_message("s1", "user", f"turn {n}")
            db.search_messages("turn")
    assert pings == []


def test_a_connection_idle_in_the_pool_is_pinged_before_it_is_lent(
        pg_store: str, pings: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "PING_AFTER_IDLE_S", 0.0)
    with SessionDB(pg_store) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "one")
        assert db.get_session("s1")["message_count"] == 1
    assert len(pings) >= 2  # every lending after the first, the connection then being idle


# --------------------------------------------------------------------------- retries


def _conflicting_unit(url: str, conflicts: int, calls: list[int]):
    """A write unit whose first ``conflicts`` attempts meet a real serialization failure:
    after it has read the counter, another transaction updates that row and commits."""

    def unit(conn: Connection) -> None:
        calls.append(1)
        conn.execute(text("SELECT value FROM state_meta WHERE key = 'n'")).scalar()
        if len(calls) <= conflicts:
            other = _other_connection(url)
            other.execute("UPDATE state_meta SET value = value || '+' WHERE key = 'n'")
            other.close()
        conn.execute(text("UPDATE state_meta SET value = value || '!' WHERE key = 'n'"))

    return unit


def test_serialization_failures_are_retried_until_the_unit_commits(pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    sql(engine, "INSERT INTO state_meta (key, value) VALUES ('n', '')")
    calls: list[int] = []
    engine_mod.run_write(engine, _conflicting_unit(pg_store, 2, calls))
    assert len(calls) == 3
    assert sql(engine, "SELECT value FROM state_meta WHERE key = 'n'")[0][0] == "++!"


def test_a_unit_that_keeps_conflicting_gives_up_within_its_budget(pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    sql(engine, "INSERT INTO state_meta (key, value) VALUES ('n', '')")
    calls: list[int] = []
    with pytest.raises(StoreBusyError, match="serialization failure") as err:
        engine_mod.run_write(engine, _conflicting_unit(pg_store, 10**6, calls), budget=0.5)
    assert err.value.attempts == len(calls) > 1 and err.value.waited_s >= 0.5
    assert "!" not in sql(engine, "SELECT value FROM state_meta WHERE key = 'n'")[0][0]


def test_counters_stay_exact_under_concurrent_writers(pg_store: str) -> None:
    writers, each = 4, 25
    with SessionDB(pg_store) as setup:
        setup.create_session("shared", "cli")
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            with SessionDB(pg_store) as db:
                for i in range(each):
                    db.append_message("shared", "assistant", f"w{n} {i}",
                                      tool_calls=[{"id": f"{n}-{i}"}])
                    db.update_token_counts("shared", input_tokens=1, output_tokens=2,
                                           api_call_count=1)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with SessionDB(pg_store) as db:
        row = db.get_session("shared")
        total = writers * each
        assert (row["message_count"], row["tool_call_count"]) == (total, total)
        assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (
            total, 2 * total, total)
        assert db.message_count("shared") == total
        assert len({m["content"] for m in db.get_messages("shared")}) == total


# --------------------------------------------------------------------------- pooler safety


def test_no_session_state_outlives_a_transaction(pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    with engine.connect() as conn:
        defaults = conn.execute(text("SELECT current_setting('transaction_isolation'), "
                                     "current_setting('lock_timeout')")).one()
        conn.rollback()
    engine_mod.run_write(engine, lambda c: c.execute(text("SELECT 1")))
    with engine_mod.reading(engine) as conn:
        assert conn.execute(text("SHOW transaction_isolation")).scalar() == "repeatable read"
    with engine.connect() as conn:  # the pooled connection, after both
        after = conn.execute(text("SELECT current_setting('transaction_isolation'), "
                                  "current_setting('lock_timeout')")).one()
        conn.rollback()
    assert after == defaults


def test_writes_are_serializable_and_appends_read_committed(pg_store: str) -> None:
    seen: dict[str, str] = {}

    def level(name: str):
        def unit(conn: Connection) -> None:
            seen[name] = conn.execute(text("SHOW transaction_isolation")).scalar()
        return unit

    engine = engine_mod.open_engine(pg_store)
    engine_mod.run_write(engine, level("write"))
    engine_mod.run_write(engine, level("append"), isolation=engine_mod.READ_COMMITTED)
    assert seen == {"write": "serializable", "append": "read committed"}


# --------------------------------------------------------------------------- bounded waits


@pytest.fixture
def short_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented budgets (60 s appends, 20 s writes and reads) shortened: what is tested
    is that they bound the wait, not their length."""
    monkeypatch.setattr(engine_mod, "APPEND_BUDGET_S", 1.5)
    monkeypatch.setattr(engine_mod, "WRITE_BUDGET_S", 1.5)
    monkeypatch.setattr(engine_mod, "READ_BUDGET_S", 1.0)


@contextlib.contextmanager
def _messages_locked(url: str) -> Iterator[None]:
    """Another session holds ``LOCK TABLE messages`` for the duration."""
    holder = _other_connection(url)
    holder.autocommit = False
    holder.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


LOCKED_OUT = {
    "append_message": lambda db: db.append_message("s1", "user", "waits"),
    "delete_session": lambda db: db.delete_session("s1"),
    "get_messages": lambda db: db.get_messages("s1"),
    "search_messages": lambda db: db.search_messages("hello"),
    "message_count": lambda db: db.message_count(),
    "clear_messages": lambda db: db.clear_messages("s1"),
}


@pytest.mark.parametrize("call", sorted(LOCKED_OUT))
def test_a_table_locked_by_another_session_makes_calls_store_busy_not_hang(
        pg_store: str, short_budgets: None, call: str) -> None:
    with SessionDB(pg_store) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello locked world")
        with _messages_locked(pg_store), pytest.raises(StoreBusyError, match="locked") as info:
            LOCKED_OUT[call](db)
        assert isinstance(info.value, sqlite3.OperationalError)  # what v11 callers catch
        assert db.message_count("s1") == 1  # nothing written, and usable again at once


def test_opening_a_store_whose_tables_another_session_locked_is_store_busy(
        pg_store: str, short_budgets: None) -> None:
    with _messages_locked(pg_store), pytest.raises(StoreBusyError):
        SessionDB(pg_store)


def _with_statement_timeout(url: str, ms: int) -> str:
    return url + ("&" if "?" in url else "?") + f"options=-c%20statement_timeout%3D{ms}"


@pytest.mark.direct_pg  # the URL's startup options: a transaction pooler does not pass them on
def test_a_statement_timeout_in_the_url_is_store_busy_not_a_driver_error(
        pg_store: str) -> None:
    with pytest.raises(StoreBusyError, match="statement_timeout"):
        SessionDB(_with_statement_timeout(pg_store, 1))


@pytest.mark.direct_pg  # the URL's startup options: a transaction pooler does not pass them on
def test_the_cli_reports_a_statement_timeout_as_busy_in_json_without_a_traceback(
        pg_store: str) -> None:
    code, doc = run_json("--db", _with_statement_timeout(pg_store, 1), "stats")
    assert code == 5, doc
    assert doc["error"]["code"] == "busy"
    assert "cannot reach" not in json.dumps(doc)


@pytest.mark.direct_pg  # the URL's startup options: a transaction pooler does not pass them on
def test_a_generous_statement_timeout_in_the_url_is_kept_and_work_goes_on(
        pg_store: str) -> None:
    url = _with_statement_timeout(pg_store, 600_000)
    with SessionDB(url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
        assert db.search_messages("hello")
    engine = engine_mod.open_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar() == "10min"
        conn.rollback()


# --------------------------------------------------------------------------- SQLite-only parts


def test_what_needs_a_file_says_so_plainly(pg_store: str) -> None:
    with SessionDB(pg_store) as db:
        for call in (lambda: db._conn, lambda: db._execute_write(lambda c: None),
                     lambda: engine_mod.engine_path(db.engine)):
            with pytest.raises(BackendNotSupportedError, match="PostgreSQL") as err:
                call()
            assert err.value.exit_code == 2


def test_search_on_a_server_store_finds_what_was_appended(pg_store: str) -> None:
    with SessionDB(pg_store) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello 世界 again")
        assert [h["snippet"] for h in db.search_messages("hello")] == [">>>hello<<< 世界 again"]
        assert len(db.search_messages("世")) == 1


def test_vacuum_on_a_server_store_is_vacuum_analyze(pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    sql(engine, "INSERT INTO state_meta (key, value) VALUES ('k', 'v')")
    engine_mod.vacuum(engine)
    analyzed = sql(engine, "SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL "
                           "FROM pg_stat_user_tables WHERE relname = 'state_meta'")
    assert analyzed == [(True,)]


def test_the_cli_lists_and_filters_a_server_store(pg_store: str) -> None:
    with SessionDB(pg_store) as db:
        db.create_session("20260101_000000_abcdef", "cli")
        db.append_message("20260101_000000_abcdef", "user", "hello there")
    code, doc = run_json("--db", pg_store, "list", "--newer-than", "1d")
    assert code == 0 and [s["id"] for s in doc["sessions"]] == ["20260101_000000_abcdef"]
    code, doc = run_json("--db", pg_store, "list", "--older-than", "1d")
    assert code == 0 and doc["sessions"] == []
