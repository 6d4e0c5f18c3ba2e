"""Processes killed mid-write, mid-upgrade and mid-maintenance, and a full disk: a rerun
completes, nothing is lost, doubled or half-written, and every integrity check passes."""

from __future__ import annotations

import multiprocessing as mp
import shutil
import signal
import sqlite3
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, event

import reliability_workers as rw
from hermes_store import engine as eng
from hermes_store import migrate
from hermes_store.errors import StoreFullError

SPAWN = mp.get_context("spawn")


# --------------------------------------------------------------------------- helpers


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=5)


def _integrity(path: Path) -> str:
    con = _connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _fts_integrity_ok(path: Path) -> None:
    con = _connect(path)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%fts5%'")]
        for table in tables:
            con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        con.close()


def _counters_match_rows(path: Path) -> dict[str, int]:
    con = _connect(path)
    try:
        counters = dict(con.execute("SELECT id, message_count FROM sessions"))
        rows = dict(con.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"))
    finally:
        con.close()
    assert counters == {sid: rows.get(sid, 0) for sid in counters}
    return counters


def _contents(path: Path) -> Counter[str]:
    con = _connect(path)
    try:
        return Counter(r[0] for r in con.execute("SELECT content FROM messages"))
    finally:
        con.close()


def _kill(proc: mp.process.BaseProcess) -> None:
    proc.kill()  # SIGKILL: no rollback, no checkpoint, no atexit
    proc.join(timeout=10)
    assert proc.exitcode == -signal.SIGKILL


@pytest.fixture
def store(head_db: Path) -> Iterator[Path]:
    engine = eng.open_engine(head_db)
    rw.create_session(engine, "s1", "cli")
    rw.append(engine, "s1", "before the crash")
    eng.dispose_all()  # the children own the file now
    yield head_db


# --------------------------------------------------------------------------- killed writers


def test_writer_killed_inside_its_transaction_leaves_no_trace(store: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = SPAWN.Process(target=rw.hold_open_transaction,
                          args=(str(store), "s1", "never committed", str(ready)))
    child.start()
    rw.wait_for_file(ready)
    _kill(child)

    assert _integrity(store) == "ok"
    _fts_integrity_ok(store)
    assert _contents(store) == Counter({"before the crash": 1})
    assert _counters_match_rows(store) == {"s1": 1}
    # The dead writer's lock died with it: the next write goes straight through.
    engine = eng.open_engine(store)
    rw.append(engine, "s1", "after the crash")
    assert _counters_match_rows(store) == {"s1": 2}


def test_writer_killed_at_a_random_moment_loses_no_committed_message(store: Path,
                                                                     tmp_path: Path) -> None:
    log = tmp_path / "committed.log"
    child = SPAWN.Process(target=rw.append_until_killed, args=(str(store), "s1", str(log)))
    child.start()
    rw.wait_for_file(log)
    while len(log.read_text().splitlines()) < 40:
        assert child.is_alive(), "the writer died before it was killed"
        time.sleep(0.005)
    _kill(child)

    logged = Counter(log.read_text().splitlines())
    stored = _contents(store)
    stored.pop("before the crash")
    assert max(stored.values()) == 1  # nothing doubled
    assert not logged - stored  # nothing the writer saw committed is missing
    # At most one commit can land between COMMIT and the log line when the signal arrives.
    assert len(stored - logged) <= 1
    assert _integrity(store) == "ok"
    _fts_integrity_ok(store)
    _counters_match_rows(store)


# --------------------------------------------------------------------------- killed upgrade

STALLING_REVISION = '''
"""A revision that does some DDL and then stalls while a marker file exists (test only)."""
import os
import pathlib
import time

from alembic import op

revision = "9999_stalls_midway"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("CREATE TABLE half_done (x INTEGER)")
    op.execute("ALTER TABLE sessions ADD COLUMN half_column INTEGER")
    op.execute("INSERT INTO state_meta (key, value) VALUES ('half', 'yes')")
    if os.path.exists({stall!r}):
        pathlib.Path({ready!r}).touch()
        time.sleep(600)


def downgrade():
    pass
'''


@pytest.fixture
def stalling(tmp_path: Path) -> tuple[str, Path, Path]:
    """A copy of the migrations plus one revision that stalls (to be killed) while ``stall`` exists."""
    location = tmp_path / "migrations"
    shutil.copytree(migrate.script_location(), location,
                    ignore=shutil.ignore_patterns("__pycache__"))
    stall, ready = tmp_path / "stall", tmp_path / "ready"
    (location / "versions" / "9999_stalls_midway.py").write_text(textwrap.dedent(
        STALLING_REVISION.format(head=migrate.head_revision(), stall=str(stall),
                                 ready=str(ready))))
    stall.touch()
    return str(location), stall, ready


def _kill_upgrade(path: Path, location: str, ready: Path) -> None:
    child = SPAWN.Process(target=rw.upgrade_with_location, args=(str(path), location))
    child.start()
    rw.wait_for_file(ready, timeout=60)
    _kill(child)


def _columns(path: Path, table: str) -> list[str]:
    con = _connect(path)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    con = _connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def _all_rows(path: Path, table: str) -> list[tuple]:
    con = _connect(path)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def _pairs(path: Path, sql: str) -> list[tuple]:
    con = _connect(path)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


def test_upgrade_killed_midway_through_a_legacy_adoption_applies_nothing_and_reruns(
        legacy_db, stalling) -> None:
    location, stall, ready = stalling
    path = legacy_db(6)
    messages_before = _all_rows(path, "messages")
    contents_before = [c for _, c in _pairs(path, "SELECT id, content FROM messages")]
    sessions_before = _all_rows(path, "sessions")

    _kill_upgrade(path, location, ready)

    assert _integrity(path) == "ok"
    assert migrate.status(path).state == "legacy"
    assert migrate.status(path).legacy_version == 6
    assert "half_done" not in _tables(path) and "alembic_version" not in _tables(path)
    assert _all_rows(path, "messages") == messages_before

    after = migrate.upgrade(path)
    assert after.state == "up-to-date"
    assert migrate.check(path) == []
    assert [c for _, c in _pairs(path, "SELECT id, content FROM messages")] == contents_before
    assert len(_all_rows(path, "sessions")) == len(sessions_before)
    _fts_integrity_ok(path)


def test_upgrade_killed_inside_a_revision_resumes_that_revision_whole(head_db: Path,
                                                                      stalling) -> None:
    location, stall, ready = stalling
    eng.dispose_all()
    _kill_upgrade(head_db, location, ready)

    assert _integrity(head_db) == "ok"
    assert migrate.status(head_db).current == migrate.head_revision()
    assert "half_column" not in _columns(head_db, "sessions")

    stall.unlink()
    migrate.upgrade(head_db, location=location)
    assert _tables(head_db) >= {"half_done"}
    assert "half_column" in _columns(head_db, "sessions")
    assert _all_rows(head_db, "state_meta") == [("half", "yes")]


# --------------------------------------------------------------------------- full disk


def _cap_growth(engine: Engine) -> None:
    """Every new connection may not grow the file: what a full disk looks like to SQLite."""
    engine.dispose()

    def cap(dbapi: sqlite3.Connection, _record: object) -> None:
        pages = dbapi.execute("PRAGMA page_count").fetchone()[0]
        dbapi.execute(f"PRAGMA max_page_count={int(pages)}")

    event.listen(engine, "connect", cap)


def test_a_full_disk_gives_a_clear_error_and_leaves_nothing_half_written(store: Path) -> None:
    engine = eng.open_engine(store)
    _cap_growth(engine)
    with pytest.raises(StoreFullError, match="full") as info:
        rw.append(engine, "s1", "a long tool result " * 20_000)
    assert isinstance(info.value, sqlite3.OperationalError)  # what v11 callers catch
    eng.dispose_all()

    assert _integrity(store) == "ok"
    _fts_integrity_ok(store)
    assert _contents(store) == Counter({"before the crash": 1})
    assert _counters_match_rows(store) == {"s1": 1}
    # Space is back: the store opens and takes the same write.
    rw.append(eng.open_engine(store), "s1", "a long tool result " * 20_000)
    assert _counters_match_rows(store) == {"s1": 2}


def test_a_full_disk_during_upgrade_leaves_the_legacy_store_as_it_was(legacy_db) -> None:
    path = legacy_db(4)
    before = _all_rows(path, "messages")
    engine = eng.open_engine(path)
    _cap_growth(engine)
    with pytest.raises(StoreFullError):
        migrate.upgrade(engine)
    eng.dispose_all()
    assert _integrity(path) == "ok"
    assert migrate.status(path).legacy_version == 4
    assert _all_rows(path, "messages") == before
    assert migrate.upgrade(path).state == "up-to-date"
