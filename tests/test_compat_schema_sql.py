"""The SQL constants of hermes_store.compat are true, runnable descriptions: executed on an
empty file, whatever version is stamped, the open adopts the file (docs/v21.md#module-names)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.compat import DEFERRED_INDEX_SQL, FTS_SQL, FTS_TRIGRAM_SQL, SCHEMA_SQL
from hermes_store.db import migrate

TABLES = {"schema_version", "state_meta", "sessions", "messages", "session_model_usage",
          "gateway_routing", "compression_locks", "async_delegations"}
DEFERRED = {"idx_messages_session_active", "idx_messages_active_null", "idx_sessions_session_key",
            "idx_sessions_gateway_peer", "idx_sessions_handoff_state"}


def _script(path: Path, *scripts: str, stamp: int | None = None) -> None:
    con = sqlite3.connect(path)
    try:
        for script in scripts:
            con.executescript(script)
        if stamp is not None:
            con.execute("INSERT INTO schema_version (version) VALUES (?)", (stamp,))
            con.commit()
    finally:
        con.close()


def _objects(path: Path) -> set[tuple[str, str]]:
    con = sqlite3.connect(path)
    try:
        return {(t, n) for t, n in con.execute("SELECT type, name FROM sqlite_master")}
    finally:
        con.close()


def _columns(path: Path) -> dict[str, set[str]]:
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
            " AND name NOT LIKE 'sqlite%'")]
        return {t: {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')} for t in tables}
    finally:
        con.close()


def test_schema_sql_makes_the_tables_and_nothing_derived(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _script(path, SCHEMA_SQL, SCHEMA_SQL)  # rerunnable
    objects = _objects(path)
    assert {n for t, n in objects if t == "table"} - {"sqlite_sequence"} == TABLES
    assert {t for t, _ in objects} == {"table", "index"}
    assert not any("fts" in n for _, n in objects)
    con = sqlite3.connect(path)
    assert all(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] == 0 for t in TABLES)
    con.close()


def test_the_deferred_indexes_apply_once_their_columns_exist(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _script(path, SCHEMA_SQL, DEFERRED_INDEX_SQL, DEFERRED_INDEX_SQL)
    assert {n for t, n in _objects(path) if t == "index"} >= DEFERRED
    assert len(re.findall(r"CREATE INDEX IF NOT EXISTS", DEFERRED_INDEX_SQL)) == 5


@pytest.mark.parametrize("stamp", [None, 1, 5, 7, 11, 15, 21, 25])
def test_an_open_adopts_a_file_made_from_schema_sql(tmp_path: Path, stamp: int | None) -> None:
    path = tmp_path / "s.db"
    _script(path, SCHEMA_SQL, DEFERRED_INDEX_SQL, stamp=stamp)
    declared = _columns(path)
    with SessionDB(path) as db:
        db.create_session("s1", "cli", cwd="/repo")
        db.append_message("s1", "user", "adopted and searchable")
        assert [m["session_id"] for m in db.search_messages("searchable")] == ["s1"]
        assert db.get_session("s1")["cwd"] == "/repo"
    after = _columns(path)
    for table, columns in declared.items():
        assert columns <= after[table], table
    assert migrate.status(path).at_head
    assert migrate.check(path) == []
    con = sqlite3.connect(path)
    assert con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == max(
        stamp or 21, 21)
    con.close()


def test_every_column_schema_sql_declares_is_modelled(tmp_path: Path) -> None:
    from hermes_store.db.models import Base

    path = tmp_path / "s.db"
    _script(path, SCHEMA_SQL)
    for table, columns in _columns(path).items():
        if table == "schema_version":
            continue
        assert columns <= set(Base.metadata.tables[table].columns.keys()), table


def test_the_fts_constants_are_the_inline_layout_and_rerunnable(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _script(path, SCHEMA_SQL, FTS_SQL, FTS_TRIGRAM_SQL, FTS_SQL, FTS_TRIGRAM_SQL)
    objects = _objects(path)
    assert {("table", "messages_fts"), ("table", "messages_fts_trigram")} <= objects
    triggers = {n for t, n in objects if t == "trigger"}
    assert triggers == {f"{i}_{op}" for i in ("messages_fts", "messages_fts_trigram")
                        for op in ("insert", "delete", "update")}
    con = sqlite3.connect(path)
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1)")
        con.execute("INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                    "VALUES ('s1', 'tool', 'grep output', 'terminal', 2)")
    assert con.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'terminal'"
                       ).fetchone()[0] == 1
    assert con.execute("SELECT COUNT(*) FROM messages_fts_trigram "
                       "WHERE messages_fts_trigram MATCH 'rep outp'").fetchone()[0] == 1
    con.close()


def test_a_file_with_the_inline_indexes_is_adopted_as_the_v11_layout(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _script(path, SCHEMA_SQL, FTS_SQL, FTS_TRIGRAM_SQL, stamp=11)
    con = sqlite3.connect(path)
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('old', 'cli', 1)")
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('old', 'user', 'written by the agent before us', 2)")
    con.close()
    assert migrate.status(path).legacy_version == 11
    with SessionDB(path) as db:
        assert [m["session_id"] for m in db.search_messages("agent")] == ["old"]
    assert migrate.status(path).at_head
