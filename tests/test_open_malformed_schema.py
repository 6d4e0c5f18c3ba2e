"""An open that fails on a malformed schema repairs it once per path per process and opens;
other damage is raised as it is, and every failure is recorded
(docs/v21.md#open-time-behaviour)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.compat import get_last_init_error, is_malformed_db_error
from hermes_store.db import engine as engine_mod
from hermes_store.facade import opening


@pytest.fixture(autouse=True)
def _fresh_claims(monkeypatch) -> None:
    monkeypatch.setattr(opening, "_repair_attempted_paths", set())


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        for n in range(12):
            db.append_message("s1", "user", f"kept through the repair {n}")
    engine_mod.dispose_all()
    return path


def _break(path: Path, statement: str) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema=ON")
    with con:
        con.execute(statement)
    con.close()


DUPLICATE = "INSERT INTO sqlite_master SELECT * FROM sqlite_master WHERE name = 'messages_fts'"
UNREPAIRABLE = "UPDATE sqlite_master SET sql = 'CREATE TABLE sessions(' WHERE name = 'sessions'"


def _backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.malformed-backup-*"))


def test_a_duplicate_schema_row_is_repaired_and_the_store_opens(store: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_store.facade")
    _break(store, DUPLICATE)
    with SessionDB(store) as db:
        assert len(db.get_messages("s1")) == 12
        assert len(db.search_messages("repair", limit=50)) == 12
    assert len(_backups(store)) == 1
    assert any("malformed schema repaired (dedup_schema" in r.getMessage()
               for r in caplog.records)


def test_an_unrepairable_schema_raises_the_original_error_and_is_not_retried(
        store: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_store.facade")
    _break(store, UNREPAIRABLE)
    with pytest.raises(sqlite3.DatabaseError) as first:
        SessionDB(store)
    assert is_malformed_db_error(first.value)
    assert "incomplete input" in str(first.value)
    with pytest.raises(sqlite3.DatabaseError) as second:
        SessionDB(store)
    assert is_malformed_db_error(second.value)
    failures = [r for r in caplog.records if "schema repair failed" in r.getMessage()]
    assert len(failures) == 1  # the second open raised without trying again
    assert get_last_init_error() == f"{type(second.value).__name__}: {second.value}"


def test_a_file_that_is_not_a_database_is_never_repaired(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"definitely not sqlite " * 300)
    before = path.read_bytes()
    with pytest.raises(sqlite3.DatabaseError) as raised:
        SessionDB(path)
    assert not is_malformed_db_error(raised.value)
    assert path.read_bytes() == before and _backups(path) == []
    assert (get_last_init_error() or "").startswith(f"{type(raised.value).__name__}: ")


def test_concurrent_opens_of_a_malformed_store_repair_it_once(store: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_store.facade")
    _break(store, DUPLICATE)
    opened: list[int] = []
    failed: list[BaseException] = []

    def open_it() -> None:
        try:
            with SessionDB(store) as db:
                opened.append(len(db.get_messages("s1")))
        except sqlite3.DatabaseError as err:
            failed.append(err)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    repairs = [r for r in caplog.records if "malformed schema repaired" in r.getMessage()]
    assert len(repairs) == 1
    assert opened and set(opened) == {12}
    assert all(is_malformed_db_error(e) for e in failed)
    assert len(opened) + len(failed) == 4
