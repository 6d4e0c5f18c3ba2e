"""A SQLite without FTS5 still opens the store: writes work, search answers nothing and says so,
and the next open with FTS5 indexes what was written meanwhile
(docs/v21.md#open-time-behaviour).

No Python here lacks FTS5, so the runtime is emulated honestly: the module the store probes for
(``engine.FTS5_MODULE``) is named ``fts5_absent``, and the file's full-text tables are made to
use that module, so every statement touching them fails exactly as on such a runtime ("no such
module"). Putting the file's module name back is the runtime gaining FTS5 again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_json

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.errors import SchemaMismatchError
from hermes_store.facade import opening

ABSENT = "fts5_absent"


def _edit_schema(path: Path, statement: str, params: tuple[str, ...] = ()) -> int:
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema=ON")
    with con:
        changed = con.execute(statement, params).rowcount
    con.close()
    return changed


def _rename_module(path: Path, old: str, new: str) -> int:
    return _edit_schema(path, "UPDATE sqlite_master SET sql = replace(sql, ?, ?) "
                        "WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'",
                        (f"USING {old}(", f"USING {new}("))


@pytest.fixture
def no_fts5(monkeypatch) -> Iterator[None]:
    monkeypatch.setattr(engine_mod, "FTS5_MODULE", ABSENT)
    monkeypatch.setattr(opening, "_no_fts5_noted", False)
    assert engine_mod.fts5_available() is False
    yield


def _lose_fts5(path: Path) -> None:
    engine_mod.dispose_all()
    assert _rename_module(path, "fts5", ABSENT) >= 2


def _regain_fts5(path: Path, monkeypatch) -> None:
    engine_mod.dispose_all()
    monkeypatch.setattr(engine_mod, "FTS5_MODULE", "fts5")
    _rename_module(path, ABSENT, "fts5")


def _triggers(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    finally:
        con.close()


def _fts_ok(path: Path) -> None:
    con = sqlite3.connect(path)
    try:
        for table in ("hs_fts", "hs_fts_trigram", "hs_fts_cjk"):
            con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        con.close()


@pytest.fixture
def loaded(head_db: Path) -> Path:
    with SessionDB(head_db) as db:
        db.create_session("old", "cli")
        db.append_message("old", "user", "written before the runtime changed: walrus")
        db.create_session("gone", "cli")
        db.append_message("gone", "user", "deleted while there was no index: narwhal")
    return head_db


def test_a_store_at_head_opens_writes_and_searches_nothing(loaded: Path, no_fts5,
                                                            caplog) -> None:
    _lose_fts5(loaded)
    caplog.set_level(logging.WARNING)
    with SessionDB(loaded) as db:
        db.create_session("new", "cli")
        db.append_message("new", "user", "written without an index: platypus")
        db.append_message("old", "assistant", "a reply to the walrus")
        assert db.delete_session("gone") is True
        assert db.search_messages("platypus") == []
        assert db.search_messages("walrus") == []
        assert db.optimize_fts() == 0
        assert db.vacuum() == 0
        assert [m["content"] for m in db.get_messages("new")] == [
            "written without an index: platypus"]
    said = [r for r in caplog.records
            if "search_messages: this SQLite has no FTS5" in r.getMessage()]
    assert [r.levelname for r in said] == ["WARNING"]  # once, however often search is called
    assert not any(t.startswith("hs_fts_") for t in _triggers(loaded))
    con = sqlite3.connect(loaded)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert {"hs_fts", "hs_fts_trigram", "hs_fts_cjk"} <= tables  # kept


def test_the_next_open_with_fts5_restores_and_indexes_what_was_written(
        loaded: Path, no_fts5, monkeypatch) -> None:
    _lose_fts5(loaded)
    with SessionDB(loaded) as db:
        db.create_session("new", "cli")
        db.append_message("new", "user", "written without an index: platypus")
        db.delete_session("gone")
    _regain_fts5(loaded, monkeypatch)
    with SessionDB(loaded) as db:
        assert [m["session_id"] for m in db.search_messages("platypus")] == ["new"]
        assert [m["session_id"] for m in db.search_messages("walrus")] == ["old"]
        assert db.search_messages("narwhal") == []
        db.append_message("new", "user", "and after: capybara")
        assert [m["session_id"] for m in db.search_messages("capybara")] == ["new"]
    _fts_ok(loaded)
    assert migrate.check(loaded) == []


def test_a_new_file_opens_and_is_completed_by_the_next_open_with_fts5(
        store_path: Path, no_fts5, monkeypatch) -> None:
    with SessionDB(store_path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "first words: axolotl")
        assert db.search_messages("axolotl") == []
    status = migrate.status(store_path)
    assert status.state == "legacy" and status.legacy_version == 21  # no index was built
    monkeypatch.setattr(engine_mod, "FTS5_MODULE", "fts5")
    engine_mod.dispose_all()
    with SessionDB(store_path) as db:
        assert [m["session_id"] for m in db.search_messages("axolotl")] == ["s1"]
    assert migrate.status(store_path).at_head


def test_a_legacy_store_keeps_its_stamps_until_fts5_is_back(legacy_db, no_fts5,
                                                            monkeypatch) -> None:
    path = legacy_db(11)
    assert _rename_module(path, "fts5", ABSENT) == 2
    with SessionDB(path) as db:
        db.create_session("new", "cli")
        db.append_message("new", "user", "meanwhile: quokka")
        assert db.search_messages("quokka") == []
    status = migrate.status(path)
    assert (status.state, status.legacy_version) == ("legacy", 11)
    _regain_fts5(path, monkeypatch)
    with SessionDB(path) as db:
        assert [m["session_id"] for m in db.search_messages("quokka")] == ["new"]
    assert migrate.status(path).at_head


# --------------------------------------------------------------------------- the agent's emulation
# The agent's tests take FTS5 away differently: every statement naming ``USING fts5`` fails with
# "no such module: fts5", on connections and cursors alike, from a swapped ``sqlite3.connect``.


def _refuse_fts5(sql: str) -> None:
    if "USING fts5" in sql:
        raise sqlite3.OperationalError("no such module: fts5")


class _RefusingFts5:
    def execute(self, sql, *args):
        _refuse_fts5(sql)
        return super().execute(sql, *args)

    def executescript(self, sql):
        _refuse_fts5(sql)
        return super().executescript(sql)


class _Cursor(_RefusingFts5, sqlite3.Cursor):
    """A cursor that refuses FTS5 statements as the connection does."""


class _Connection(_RefusingFts5, sqlite3.Connection):
    def cursor(self, factory=_Cursor):
        return super().cursor(factory)


@pytest.fixture
def refusing_fts5(monkeypatch) -> Iterator[None]:
    engine_mod.fts5_available()  # a process that had already asked, with FTS5, before the swap
    real = sqlite3.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("factory", _Connection)
        return real(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(opening, "_no_fts5_noted", False)
    yield
    engine_mod.dispose_all()


def test_a_new_store_is_created_where_fts5_statements_fail(store_path: Path,
                                                           refusing_fts5) -> None:
    with SessionDB(store_path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "no index here: wombat")
        assert db.search_messages("wombat") == []
        assert [m["content"] for m in db.get_messages("s1")] == ["no index here: wombat"]


@pytest.mark.parametrize("version", [6, 10, 11, 21])
def test_an_old_store_opens_where_fts5_statements_fail(legacy_db, version: int,
                                                       refusing_fts5) -> None:
    path = legacy_db(version)
    with SessionDB(path) as db:
        db.create_session("new", "cli")
        db.append_message("new", "user", "meanwhile: wombat")
        assert db.search_messages("wombat") == []
        assert len(db.get_messages("new")) == 1


def test_an_explicit_upgrade_without_fts5_says_why_and_changes_nothing(legacy_db,
                                                                       refusing_fts5) -> None:
    path = legacy_db(10)
    before = path.read_bytes()
    with pytest.raises(SchemaMismatchError, match="no FTS5"):
        migrate.upgrade(path)
    engine_mod.dispose_all()
    assert path.read_bytes() == before


def test_a_malformed_store_is_repaired_and_opens_where_fts5_statements_fail(
        loaded: Path, refusing_fts5, monkeypatch) -> None:
    monkeypatch.setattr(opening, "_repair_attempted_paths", set())
    engine_mod.dispose_all()
    _edit_schema(loaded, "INSERT INTO sqlite_master SELECT * FROM sqlite_master "
                 "WHERE name = 'messages_fts'")
    with SessionDB(loaded) as db:
        db.append_message("old", "user", "after the repair: wombat")
        assert db.search_messages("wombat") == []
        assert len(db.get_messages("old")) == 2


def test_doctor_calls_a_missing_fts5_module_a_warning_not_damage(loaded: Path,
                                                                 refusing_fts5) -> None:
    code, doc = run_json("--db", str(loaded), "doctor")
    fts = [f for f in doc["findings"] if f["check"].startswith("fts:")]
    assert fts and {f["status"] for f in fts} == {"warn"}
    assert all("no FTS5" in f["detail"] for f in fts)
    assert doc["damaged"] is False and code != 7
