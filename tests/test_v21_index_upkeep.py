"""``optimize_fts`` merges the search indexes and counts the word and substring ones; ``vacuum``
returns that count; the write path merges every 1,000th write, best effort, after its
transaction (docs/v21.md#behaviour-changes)."""

from __future__ import annotations

import itertools
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.facade import upkeep
from hermes_store.ops import storage

# FTS5 segments and merges are SQLite's (the tests read the index's shadow tables from the
# file); PostgreSQL search is its own slice.
pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def db(db: SessionDB) -> Iterator[SessionDB]:
    """The shared ``db`` (v21_stores), with thirty messages in one session."""
    db.create_session("s1", "cli")
    for n in range(30):
        db.append_message("s1", "user", f"segment {n} of the lemur index")
    yield db


def _segments(path: Path, table: str) -> int:
    """The index's segments (distinct segment ids of its ``_idx`` table): a merge folds them
    into one."""
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT COUNT(DISTINCT segid) FROM {table}_idx").fetchone()[0]
    finally:
        con.close()


def test_both_indexes_are_merged_and_counted(db: SessionDB) -> None:
    before = [m["id"] for m in db.search_messages("lemur", limit=50)]
    assert _segments(db.db_path, "hs_fts") > 1
    assert db.optimize_fts() == 2
    assert _segments(db.db_path, "hs_fts") == 1
    assert _segments(db.db_path, "hs_fts_trigram") <= 1  # holds CJK rows only: may be empty
    assert _segments(db.db_path, "hs_fts_cjk") <= 1  # merged, not counted
    assert [m["id"] for m in db.search_messages("lemur", limit=50)] == before
    assert db.optimize_fts() == 2  # repeatable


def test_without_the_substring_index_the_count_is_one(db: SessionDB) -> None:
    db._write(lambda c: c.exec_driver_sql("DROP TABLE hs_fts_trigram"))
    assert db.optimize_fts() == 1


def test_vacuum_returns_the_merge_count(db: SessionDB) -> None:
    assert db.vacuum() == 2
    assert len(db.search_messages("lemur", limit=50)) == 30


def test_a_failing_merge_is_logged_and_the_others_still_run(db: SessionDB, monkeypatch,
                                                            caplog) -> None:
    real = storage.merge_index

    def failing(conn, name: str) -> bool:  # type: ignore[no-untyped-def]
        if name == "hs_fts":
            raise sqlite3.OperationalError("database or disk is full")
        return real(conn, name)

    monkeypatch.setattr(storage, "merge_index", failing)
    caplog.set_level(logging.WARNING, logger="hermes_store.facade")
    assert db.optimize_fts() == 1
    assert any("merging hs_fts failed" in r.getMessage() for r in caplog.records)


def test_every_thousandth_write_merges_after_its_transaction(db: SessionDB,
                                                             monkeypatch) -> None:
    merged: list[tuple[str, str | None]] = []
    real = storage.merge_index

    def spying(conn, name: str) -> bool:  # type: ignore[no-untyped-def]
        # What another connection sees: the write that triggered the merge is committed.
        other = sqlite3.connect(db.db_path)
        seen = other.execute("SELECT value FROM state_meta WHERE key = 'k'").fetchone()
        other.close()
        merged.append((name, seen[0] if seen else None))
        return real(conn, name)

    monkeypatch.setattr(storage, "merge_index", spying)
    counter = db._write_count
    done = next(counter)  # writes so far, plus this one
    until_next = upkeep.EVERY_N_WRITES - done % upkeep.EVERY_N_WRITES
    for n in range(until_next - 1):
        db.set_meta("k", str(n))
    assert merged == []
    db.set_meta("k", "the thousandth")
    assert merged == [(name, "the thousandth") for name in storage.INDEXES]
    assert db.get_meta("k") == "the thousandth"


def test_a_failing_periodic_merge_never_fails_the_write(db: SessionDB, monkeypatch,
                                                        caplog) -> None:
    def broken(conn, name: str) -> bool:  # type: ignore[no-untyped-def]
        raise RuntimeError("merge exploded")

    monkeypatch.setattr(storage, "merge_index", broken)
    db._OPTIMIZE_EVERY_N_WRITES = 1
    caplog.set_level(logging.WARNING, logger="hermes_store.facade")
    db.set_meta("k", "saved")
    assert db.get_meta("k") == "saved"
    assert any("periodic optimize_fts failed" in r.getMessage() for r in caplog.records)


def test_the_cadence_and_the_merge_are_the_instances_own(db: SessionDB) -> None:
    calls: list[int] = []
    real = db.optimize_fts

    def wrapped() -> int:
        calls.append(1)
        return real()

    db.optimize_fts = wrapped  # type: ignore[method-assign]
    db._OPTIMIZE_EVERY_N_WRITES = 3
    db._write_count = itertools.count(1)  # the cadence counts from here
    db.create_session("s2", "cli")
    db.append_message("s2", "user", "one")
    assert calls == []
    db.append_message("s2", "user", "two")  # the third write
    assert calls == [1]
    for n in range(3):
        db.set_meta("k", str(n))
    assert calls == [1, 1]


def test_a_wrapped_merge_that_raises_never_fails_the_write(db: SessionDB) -> None:
    def broken() -> int:
        raise sqlite3.OperationalError("database or disk is full")

    db.optimize_fts = broken  # type: ignore[method-assign]
    db._OPTIMIZE_EVERY_N_WRITES = 1
    db.create_session("s3", "cli")
    assert db.append_message("s3", "user", "kept") > 0
    assert db.get_session("s3")["message_count"] == 1


def test_a_closed_store_refuses(store_path: Path) -> None:
    db = SessionDB(store_path)
    db.close()
    with pytest.raises(sqlite3.ProgrammingError):
        db.optimize_fts()
