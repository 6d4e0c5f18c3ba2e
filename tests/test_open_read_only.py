"""``SessionDB(path, read_only=True)``: a URI read-only open with no schema work, pragma writes or
write lock; a missing file, every write and a layout behind head are
``sqlite3.OperationalError`` (docs/v21.md#open-time-behaviour)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_support import sha256

from hermes_store import SessionDB
from hermes_store.compat import SessionDB as CompatSessionDB
from hermes_store.db import engine as engine_mod


@pytest.fixture
def store(head_db: Path) -> Path:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "readable from anywhere")
    engine_mod.dispose_all()
    return head_db


@pytest.mark.parametrize("how", ["keyword", "positional", "old-keyword", "compat"])
def test_the_keyword_the_position_and_the_old_spelling_all_open_read_only(
        store: Path, how: str) -> None:
    opened = {"keyword": lambda: SessionDB(store, read_only=True),
              "positional": lambda: SessionDB(store, True),
              "old-keyword": lambda: SessionDB(store, readonly=True),
              "compat": lambda: CompatSessionDB(store, True)}[how]()
    with opened as db:
        assert db.read_only is True and db.db_path == store
        assert db.get_session("s1")["id"] == "s1"
        assert [m["session_id"] for m in db.search_messages("readable")] == ["s1"]


def test_a_read_write_open_says_so(store: Path) -> None:
    with SessionDB(store) as db:
        assert db.read_only is False


def test_a_missing_file_is_an_operational_error_and_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        SessionDB(tmp_path / "none.db", read_only=True)
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("write", [
    lambda db: db.create_session("s2", "cli"),
    lambda db: db.append_message("s1", "user", "no"),
    lambda db: db.set_meta("k", "v"),
    lambda db: db.set_session_title("s1", "t"),
])
def test_every_write_is_an_operational_error(store: Path, write) -> None:
    before = sha256(store)
    with SessionDB(store, read_only=True) as db, pytest.raises(sqlite3.OperationalError):
        write(db)
    assert sha256(store) == before


def test_a_layout_behind_head_says_an_upgrade_is_needed(legacy_db) -> None:
    path = legacy_db(11)
    before = sha256(path)
    with pytest.raises(sqlite3.OperationalError, match="upgrade"):
        SessionDB(path, read_only=True)
    assert sha256(path) == before


def test_opening_changes_nothing_and_takes_no_write_lock(store: Path) -> None:
    before = sha256(store)
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another profile's live store, mid-write
    try:
        with SessionDB(store, read_only=True) as db:
            assert db.get_messages("s1")[0]["content"] == "readable from anywhere"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert sha256(store) == before
