"""An open creates every missing table, column and index whatever the stamps say, heals NULL
``messages.active``, and writes nothing when nothing is missing
(docs/v21.md#open-time-behaviour)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cli_support import sha256

from hermes_store import SessionDB
from hermes_store.compat import SCHEMA_SQL
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.db.models import Base
from hermes_store.repo import backfills


def _columns(path: Path, table: str) -> dict[str, tuple[str, int, str | None]]:
    con = sqlite3.connect(path)
    try:
        return {r[1]: (r[2], r[3], r[4]) for r in con.execute(f"PRAGMA table_info({table})")}
    finally:
        con.close()


def _names(path: Path, kind: str) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = ?",
                                          (kind,))}
    finally:
        con.close()


def _sql(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    with con:
        for statement in statements:
            con.execute(statement)
    con.close()


def _complete(path: Path) -> None:
    """Every modelled table (but the opt-in ones), column and index is in the file."""
    tables = _names(path, "table")
    indexes = _names(path, "index")
    for table in Base.metadata.sorted_tables:
        if table.name in migrate.OPT_IN_TABLES:
            continue
        assert table.name in tables
        assert set(table.columns.keys()) <= set(_columns(path, table.name)), table.name
        assert {i.name for i in table.indexes} <= indexes, table.name


def test_a_file_stamped_11_without_state_meta_ends_complete(legacy_db) -> None:
    path = legacy_db(11)
    _sql(path, "DROP TABLE state_meta")
    with SessionDB(path) as db:
        db.set_meta("k", "v")
        assert db.get_meta("k") == "v"
    _complete(path)
    assert migrate.check(path) == []


def test_a_file_stamped_7_without_reasoning_content_ends_complete(legacy_db) -> None:
    path = legacy_db(6)
    _sql(path, "UPDATE schema_version SET version = 7")
    assert "reasoning_content" not in _columns(path, "messages")
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "assistant", "answer", reasoning_content="thought")
        assert db.get_messages("s1")[-1]["reasoning_content"] == "thought"
    _complete(path)


def test_columns_tables_and_indexes_missing_at_head_come_back(head_db: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
    engine_mod.dispose_all()
    _sql(head_db, "ALTER TABLE sessions DROP COLUMN rewind_count", "DROP TABLE compression_locks",
         "DROP INDEX idx_sessions_handoff_state")
    with SessionDB(head_db) as db:
        assert db.try_acquire_compression_lock("s1", "me") is True
        assert db.get_session("s1")["rewind_count"] == 0
    assert _columns(head_db, "sessions")["rewind_count"] == ("INTEGER", 1, "0")
    _complete(head_db)
    assert migrate.check(head_db) == []


def test_the_telegram_tables_are_never_created_by_an_open(head_db: Path) -> None:
    SessionDB(head_db).close()
    assert not {"telegram_dm_topic_mode", "telegram_dm_topic_bindings"} & _names(head_db, "table")


def test_opening_a_complete_store_writes_nothing(head_db: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
    engine_mod.dispose_all()
    con = sqlite3.connect(head_db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    wal = Path(f"{head_db}-wal")
    before = (sha256(head_db), wal.stat().st_size if wal.exists() else 0)
    with SessionDB(head_db) as db:
        assert db.get_session("s1") is not None
    after = (sha256(head_db), wal.stat().st_size if wal.exists() else 0)
    assert after == before


# --------------------------------------------------------------------------- NULL active


def _nullable_active_store(path: Path) -> None:
    """A file whose ``messages.active`` lost its default (the agent wrote some such files)."""
    schema = SCHEMA_SQL.replace("active INTEGER NOT NULL DEFAULT 1", "active INTEGER")
    assert schema != SCHEMA_SQL
    con = sqlite3.connect(path)
    con.executescript(schema)
    con.execute("INSERT INTO schema_version VALUES (21)")
    con.commit()
    con.close()


def _agent_rows(path: Path, sid: str, n: int) -> None:
    con = sqlite3.connect(path)
    with con:
        con.execute("INSERT OR IGNORE INTO sessions (id, source, started_at) VALUES (?, 'cli', 1)",
                    (sid,))
        con.executemany("INSERT INTO messages (session_id, role, content, timestamp, active) "
                        "VALUES (?, 'user', ?, ?, NULL)", [(sid, f"m{i}", 2 + i) for i in range(n)])
    con.close()


def _null_active(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL").fetchone()[0]
    finally:
        con.close()


def test_null_active_rows_are_healed_on_adoption_and_on_every_open(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _nullable_active_store(path)
    _agent_rows(path, "s1", 3)
    with SessionDB(path) as db:
        assert [m["content"] for m in db.get_messages("s1")] == ["m0", "m1", "m2"]
    assert _null_active(path) == 0
    engine_mod.dispose_all()
    _agent_rows(path, "s2", 2)  # an agent writes more while we are away
    assert _null_active(path) == 2
    with SessionDB(path) as db:
        assert len(db.get_messages("s2")) == 2
    assert _null_active(path) == 0


def test_the_heal_checks_through_the_partial_index_first(head_db: Path) -> None:
    SessionDB(head_db).close()
    stmt = backfills.select(backfills.messages.c.id).where(
        backfills.messages.c.active.is_(None)).limit(1)
    with engine_mod.reading(engine_mod.open_engine(head_db)) as conn:
        sql = str(stmt.compile(conn, compile_kwargs={"literal_binds": True}))
        plan = [str(r[3]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
        assert backfills.has_null_active(conn) is False
    assert any("idx_messages_active_null" in step for step in plan), plan


# --------------------------------------------------------------------------- hand-made layouts

# The agent's v10 columns, as a test of the agent's (or a user's script) lays a file out by hand:
# no user_id and none of the newer session columns, and no search index at all.
HAND_MADE_V10 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0, title TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL, content TEXT,
    tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL NOT NULL,
    token_count INTEGER, finish_reason TEXT);
INSERT INTO schema_version VALUES (10);
INSERT INTO sessions (id, source, started_at) VALUES ('old', 'cli', 1.0);
INSERT INTO messages (session_id, role, content, tool_calls, timestamp) VALUES ('old', 'assistant',
    'calling a tool', '[{"function": {"name": "lookup", "arguments": "{\\"q\\": \\"zebrafish\\"}"}}]',
    2.0);
INSERT INTO messages (session_id, role, content, tool_name, timestamp)
    VALUES ('old', 'tool', 'done', 'terminal_exec', 3.0);
"""


def test_a_hand_made_v10_file_without_user_id_opens_complete_and_indexed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    con = sqlite3.connect(path)
    con.executescript(HAND_MADE_V10)
    con.close()
    with SessionDB(path) as db:
        db.create_session("new", "cli", user_id="u1")
        assert db.get_session("new")["user_id"] == "u1"
        # The word index covers tool names and the tool-call JSON of the rows written at v10.
        assert [m["session_id"] for m in db.search_messages("terminal_exec")] == ["old"]
        assert [m["session_id"] for m in db.search_messages("zebrafish")] == ["old"]
    _complete(path)
    assert migrate.status(path).at_head


def test_an_active_column_added_without_its_default_stores_1_on_append(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    con = sqlite3.connect(path)
    con.executescript(HAND_MADE_V10)
    con.execute("ALTER TABLE messages ADD COLUMN active INTEGER")
    con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('old', 'user', 'written with no active', 4.0)")
    con.commit()
    con.close()
    with SessionDB(path) as db:
        db.append_message("old", "user", "appended after the open")
        assert [m["content"] for m in db.get_messages("old")][-2:] == [
            "written with no active", "appended after the open"]
    con = sqlite3.connect(path)
    assert {r[0] for r in con.execute("SELECT DISTINCT active FROM messages")} == {1}
    con.close()
