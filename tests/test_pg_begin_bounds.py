"""A PostgreSQL unit's lock and statement bounds travel in the message that begins it: one
round trip, not psycopg's ``BEGIN`` and then a bound statement (db/postgres.py)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

from hermes_store.db import engine as engine_mod
from hermes_store.db import postgres
from hermes_store.errors import StoreBusyError

pytestmark = pytest.mark.direct_pg  # the backend's own pid and activity: not behind a pooler


def _first_message(url: str, conn: Connection) -> str:
    """What the server last received from ``conn``'s backend, asked from another connection."""
    pid = conn.connection.driver_connection.info.backend_pid
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as other:
        return other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s",
                             [pid]).fetchone()[0]


def _settings(conn: Connection) -> tuple[Any, ...]:
    """Isolation, then the lock and statement bounds in milliseconds."""
    ms = "CAST(extract(epoch FROM CAST(current_setting('{}') AS interval)) * 1000 AS int)"
    return tuple(conn.execute(text(
        f"SELECT current_setting('transaction_isolation'), {ms.format('lock_timeout')}, "
        f"{ms.format('statement_timeout')}")).one())


def test_a_write_unit_is_begun_serializable_with_its_lock_bound_in_one_message(
        pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    seen: list[Any] = []
    engine_mod.run_write(engine, lambda c: seen.extend([_first_message(pg_store, c),
                                                        _settings(c)]))
    assert seen[0].startswith("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT set_config(")
    assert seen[1] == ("serializable", int(engine_mod.BUSY_TIMEOUT_S * 1000), 0)


def test_an_append_unit_is_begun_read_committed_with_both_bounds_in_one_message(
        pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    seen: list[Any] = []
    engine_mod.run_write(engine, lambda c: seen.extend([_first_message(pg_store, c),
                                                        _settings(c)]),
                         isolation=postgres.READ_COMMITTED, budget=30.0)
    assert seen[0].startswith("BEGIN ISOLATION LEVEL READ COMMITTED; SELECT set_config(")
    level, lock, statement = seen[1]
    assert level == "read committed"
    assert lock == statement and 0 < lock <= 30_000


def test_a_read_is_begun_repeatable_read_and_read_only_engines_read_only(pg_store: str) -> None:
    for readonly, words in ((False, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT"),
                            (True, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT")):
        engine = engine_mod.open_engine(pg_store, readonly=readonly)
        with engine_mod.reading(engine) as conn:
            assert _first_message(pg_store, conn).startswith(words)
            only = conn.execute(text("SHOW transaction_read_only")).scalar()
            assert _settings(conn)[:2] == ("repeatable read",
                                           int(engine_mod.READ_BUDGET_S * 1000))
        assert only == ("on" if readonly else "off")


def test_bounds_asked_for_inside_an_open_transaction_still_apply(pg_store: str) -> None:
    engine = engine_mod.open_engine(pg_store)
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SELECT 1"))
        postgres.bound_unit(conn, lock_wait_s=2.5, budget_s=None)
        assert _settings(conn)[1] == 2500


def test_a_begin_message_the_server_cancels_is_store_busy_and_its_connection_reusable(
        pg_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = pg_store + ("&" if "?" in pg_store else "?") + "options=-c%20statement_timeout%3D200"
    engine = engine_mod.open_engine(url)
    with engine_mod.reading(engine) as conn:  # connected, probed, back in the pool
        conn.execute(text("SELECT 1"))
    monkeypatch.setattr(postgres, "_LOCK_BOUND", "SELECT pg_sleep(1), '{lock_ms}'")
    with pytest.raises(StoreBusyError, match="statement_timeout"), \
            engine_mod.reading(engine) as conn:
        conn.execute(text("SELECT 1"))  # not reached: the unit's BEGIN is what the server cancels
    monkeypatch.undo()
    with engine_mod.reading(engine) as conn:  # the same pooled connection, rolled back
        assert conn.execute(text("SELECT 1")).scalar() == 1
        assert _settings(conn)[0] == "repeatable read"
