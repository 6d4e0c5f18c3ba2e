"""The SQLite policy: file modes, no writes on open, transactional control, lock retries (and
concurrent writers on either backend)."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest
from backends import sql
from sqlalchemy import text

from hermes_store.db import engine as eng
from hermes_store.db import migrate
from hermes_store.errors import StoreBusyError, StoreNotFoundError, StoreUnopenableError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_store_and_its_sidecars_are_private(store_path: Path) -> None:
    engine = eng.open_engine(store_path)
    migrate.upgrade(engine)
    with engine.connect() as conn:  # holds the WAL open so the sidecars exist
        conn.exec_driver_sql("SELECT count(*) FROM sessions").scalar()
        for suffix in ("", "-wal", "-shm"):
            assert _mode(Path(f"{store_path}{suffix}")) == 0o600, suffix


def test_store_is_in_wal_mode_with_foreign_keys(head_db: Path) -> None:
    engine = eng.open_engine(head_db)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1000
        assert conn.exec_driver_sql("PRAGMA journal_size_limit").scalar() == 64 * 1024 * 1024


def test_opening_an_existing_store_writes_nothing(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    before = head_db.stat().st_mtime_ns
    engine = eng.open_engine(head_db)
    migrate.upgrade(engine)
    with eng.reading(engine) as conn:
        conn.exec_driver_sql("SELECT count(*) FROM messages").scalar()
    wal = Path(f"{head_db}-wal")
    assert head_db.stat().st_mtime_ns == before
    assert not wal.exists() or wal.stat().st_size == 0


def test_one_engine_per_file_per_process(head_db: Path) -> None:
    assert eng.open_engine(head_db) is eng.open_engine(str(head_db))


def test_readonly_open_of_a_missing_store_says_so(store_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        eng.open_engine(store_path, readonly=True)
    assert not store_path.exists()


def test_a_file_that_is_not_a_database_gives_a_clear_error(store_path: Path) -> None:
    store_path.write_bytes(b"this is not sqlite" * 400)
    with (pytest.raises(StoreUnopenableError, match="not an SQLite database"),
          eng.reading(eng.open_engine(store_path)) as conn):
        conn.exec_driver_sql("SELECT 1 FROM sqlite_master").all()
    assert store_path.read_bytes() == b"this is not sqlite" * 400


def test_writers_begin_immediate_and_roll_back_on_error(head_db: Path) -> None:
    engine = eng.open_engine(head_db)

    def unit(conn):
        conn.execute(text("INSERT INTO state_meta (key, value) VALUES ('k', 'v')"))
        # Another connection cannot write while we hold the RESERVED lock from BEGIN IMMEDIATE.
        other = sqlite3.connect(head_db, timeout=0)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()
        raise ValueError("caller error")

    with pytest.raises(ValueError):
        eng.run_write(engine, unit)
    with eng.reading(engine) as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM state_meta WHERE key = 'k'").scalar() == 0


def test_a_lock_held_briefly_by_another_process_is_waited_out(head_db: Path) -> None:
    engine = eng.open_engine(head_db)
    holder = sqlite3.connect(head_db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(1.8, holder.rollback).start()  # longer than one busy timeout
    eng.run_write(engine, lambda c: c.execute(text("INSERT INTO state_meta VALUES ('a', '1')")))
    holder.close()
    with eng.reading(engine) as conn:
        assert conn.exec_driver_sql("SELECT value FROM state_meta WHERE key='a'").scalar() == "1"


def test_an_exhausted_budget_raises_a_lock_error_naming_the_wait(head_db: Path) -> None:
    engine = eng.open_engine(head_db)
    holder = sqlite3.connect(head_db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreBusyError, match=r"locked.*gave up after") as info:
            eng.run_write(engine, lambda c: c.execute(text("INSERT INTO state_meta VALUES ('b', '1')")),
                          budget=1.5)
        assert isinstance(info.value, sqlite3.OperationalError)
        assert info.value.waited_s >= 1.5
    finally:
        holder.rollback()
        holder.close()


def _append_worker(path: str, worker: int, count: int, out: mp.Queue) -> None:
    engine = eng.open_engine(path)
    errors = []
    for i in range(count):
        def unit(conn, i=i):
            conn.execute(text(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s', 'user', :c, :t)"), {"c": f"w{worker} m{i}", "t": time.time()})
            conn.execute(text("UPDATE sessions SET message_count = message_count + 1 WHERE id='s'"))
        try:
            eng.run_write(engine, unit)
        except Exception as err:  # noqa: BLE001 - reported to the parent
            errors.append(repr(err))
    out.put(errors)


@pytest.mark.slow
def test_four_processes_appending_lose_nothing(head_store: str) -> None:
    # On PostgreSQL the four contend for one counter row in serializable units: conflicts are
    # retried, and every message still lands once with the counter exact.
    engine = eng.open_engine(head_store)
    sql(engine, "INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 0)")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_append_worker, args=(head_store, w, 60, out)) for w in range(4)]
    for p in procs:
        p.start()
    errors = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert errors == [[], [], [], []]
    contents = [r[0] for r in sql(engine, "SELECT content FROM messages")]
    counter = sql(engine, "SELECT message_count FROM sessions WHERE id='s'")[0][0]
    assert len(contents) == 240 and len(set(contents)) == 240
    assert counter == 240


def test_every_fiftieth_write_runs_a_passive_checkpoint(head_db: Path, monkeypatch) -> None:
    engine = eng.open_engine(head_db)
    calls = []
    monkeypatch.setattr(eng, "checkpoint", lambda e, mode="PASSIVE": calls.append(mode))
    state = eng._file_state(eng.engine_path(engine))
    state.writes = 0
    for i in range(120):
        eng.run_write(engine, lambda c, i=i: c.execute(
            text("INSERT INTO state_meta VALUES (:k, 'v')"), {"k": f"k{i}"}))
    assert calls == ["PASSIVE", "PASSIVE"]


def test_text_that_is_not_utf8_degrades_instead_of_raising(head_db: Path) -> None:
    # json_extract turns a lone-surrogate escape into bytes that are not valid UTF-8.
    engine = eng.open_engine(head_db)
    with eng.reading(engine) as conn:
        value = conn.exec_driver_sql("""SELECT json_extract('{"t": "a \\ud83d b"}', '$.t')""").scalar()
    assert value.startswith("a ") and value.endswith(" b") and "\ufffd" in value


def test_an_error_that_merely_mentions_locked_is_not_retried(head_db: Path, monkeypatch) -> None:
    engine = eng.open_engine(head_db)
    sleeps = []
    monkeypatch.setattr(eng.time, "sleep", sleeps.append)
    with pytest.raises(sqlite3.OperationalError, match="no such table: blocked_users") as info:
        eng.run_write(engine, lambda c: c.exec_driver_sql("SELECT * FROM blocked_users"), budget=5)
    assert not isinstance(info.value, StoreBusyError)
    assert sleeps == []  # failed at once instead of retrying for the whole budget
