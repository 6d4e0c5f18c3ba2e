"""Agents of older releases on a file we upgraded (docs/mixed-fleets.md): their open changes
nothing of ours, their writes reach every index exactly once, and foreign index triggers are
noticed by check and doctor and removed by repair.

The agents are emulated by the SQL their stores run: the v21 line's open-time DDL (its
``SCHEMA_SQL``, column reconcile, deferred indexes and inline full-text DDL, each ``IF NOT
EXISTS``, then its migrations for a ``schema_version`` below 21) and the v11 line's (its v11
tables and its full-text DDL by the same trigger names), then their plain ``INSERT``s.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.compat import (
    DEFERRED_INDEX_SQL,
    FTS_SQL,
    FTS_TRIGRAM_SQL,
    SCHEMA_SQL,
    apply_wal_with_fallback,
)
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.ops import repair, stats, storage

V11_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id));
CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title)
    WHERE title IS NOT NULL;
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content=messages, content_rowid=id);
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""
TOOL_OUTPUT = "zebrafinch " + "x" * 20_000  # a 20 KB tool result


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    apply_wal_with_fallback(con)
    return con


def v21_agent_open(path: Path) -> list[int]:
    """The v21 store's open; returns the migrations (by version) its stamp made it run."""
    con = _connect(path)
    try:
        con.executescript(SCHEMA_SQL)
        version = con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        declared = sqlite3.connect(":memory:")
        declared.executescript(SCHEMA_SQL)
        for (table,) in declared.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            for _, name, kind, notnull, default, _ in declared.execute(
                    f"PRAGMA table_info({table})"):
                if name not in have:
                    ddl = f"{name} {kind}" + (" NOT NULL" if notnull else "")
                    ddl += f" DEFAULT {default}" if default is not None else ""
                    con.execute(f"ALTER TABLE {table} ADD COLUMN {ddl}")
        declared.close()
        con.executescript(DEFERRED_INDEX_SQL)
        ran = [v for v in range(12, 22) if version is not None and version < v]
        if 20 in ran:  # its usage seed: insert-if-absent per session, from the totals
            con.execute(
                "INSERT OR IGNORE INTO session_model_usage (session_id, model, input_tokens, "
                "output_tokens) SELECT id, COALESCE(model, 'unknown'), input_tokens, "
                "output_tokens FROM sessions WHERE input_tokens + output_tokens > 0")
        con.executescript(FTS_SQL + FTS_TRIGRAM_SQL)
        con.execute("UPDATE messages SET active = 1 WHERE active IS NULL")
        if version is None or version < 21:
            con.execute("DELETE FROM schema_version")
            con.execute("INSERT INTO schema_version VALUES (21)")
        return ran
    finally:
        con.close()


def v11_agent_open(path: Path) -> list[int]:
    con = _connect(path)
    try:
        con.executescript(V11_SCHEMA_SQL)
        version = con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        return [v for v in range(2, 12) if version < v]
    finally:
        con.close()


def agent_writes(path: Path, sid: str, *, v21: bool) -> None:
    """A session with a user message and a 20 KB tool message, as the agent writes them."""
    con = _connect(path)
    now = time.time()
    extra = ", active, observed" if v21 else ""
    values = ", 1, 0" if v21 else ""
    with con:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
                    (sid, now))
        for role, content, tool in (("user", f"kingfisher question from {sid}", None),
                                    ("tool", TOOL_OUTPUT, "terminal")):
            con.execute(f"INSERT INTO messages (session_id, role, content, tool_name, "
                        f"timestamp{extra}) VALUES (?, ?, ?, ?, ?{values})",
                        (sid, role, content, tool, now))
            con.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?",
                        (sid,))
        con.execute("COMMIT")
    con.close()


def _schema(path: Path) -> list[tuple[str, str, str]]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
                           ).fetchall()
    finally:
        con.close()


def _count(path: Path, sql: str) -> int:
    con = sqlite3.connect(path)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def _integrity(path: Path) -> None:
    con = sqlite3.connect(path)
    try:
        for table in ("hs_fts", "hs_fts_trigram", "hs_fts_cjk"):
            con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            con.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
    finally:
        con.close()


def _trigram_hits(path: Path, term: str, index: str = "hs_fts_trigram") -> int:
    return _count(path, f"SELECT COUNT(*) FROM {index} WHERE {index} MATCH '{term}'")


def _ours(path: Path) -> list[tuple[str, str, str]]:
    return [o for o in _schema(path) if o[1].startswith("hs_")]


def _added(before: list[tuple[str, str, str]], path: Path) -> set[str]:
    """Names of the objects that appeared since ``before``; nothing that was there changed."""
    after = _schema(path)
    assert set(before) <= set(after)
    return {name for _, name, _ in set(after) - set(before)}


@pytest.fixture
def upgraded(legacy_db) -> Path:
    """The genuine v11 file after ``hermes-store upgrade`` and ``optimize-storage``."""
    path = legacy_db(11)
    migrate.upgrade(path)
    storage.optimize_storage(path)
    engine_mod.dispose_all()
    return path


def test_a_v21_agent_opening_the_upgraded_file_migrates_nothing_and_adds_only_its_index(
        upgraded: Path) -> None:
    before = _schema(upgraded)
    usage = _count(upgraded, "SELECT SUM(input_tokens + output_tokens) FROM session_model_usage")
    assert v21_agent_open(upgraded) == []  # its stamp says there is nothing to migrate
    # Our names are not its names (revision 0022): it finds its own absent and builds its inline
    # indexes beside ours, changing nothing of ours (docs/mixed-fleets.md says what that costs).
    added = _added(before, upgraded)
    assert added and all(n.startswith("messages_fts") for n in added)
    assert _count(upgraded, "SELECT SUM(input_tokens + output_tokens) "
                            "FROM session_model_usage") == usage
    assert usage == _count(upgraded, "SELECT SUM(input_tokens + output_tokens) FROM sessions "
                                     "WHERE input_tokens + output_tokens > 0")


def test_a_v21_agents_writes_reach_each_index_once(upgraded: Path) -> None:
    v21_agent_open(upgraded)
    agent_writes(upgraded, "from_v21", v21=True)
    _integrity(upgraded)
    assert _trigram_hits(upgraded, "zebrafinch") == 0  # tool output stays out
    assert _count(upgraded, "SELECT COUNT(*) FROM hs_fts WHERE hs_fts MATCH 'kingfisher'") == 1
    with SessionDB(upgraded) as db:
        assert [h["session_id"] for h in db.search_messages("kingfisher")] == ["from_v21"]
        assert [h["session_id"] for h in db.search_messages("zebrafinch")] == ["from_v21"]
    assert migrate.check(upgraded) == []


def test_a_v11_agent_keeps_working_against_the_head_layout(upgraded: Path) -> None:
    before = _schema(upgraded)
    assert v11_agent_open(upgraded) == []
    assert _added(before, upgraded) == {"messages_fts", "messages_fts_insert",
                                        "messages_fts_delete", "messages_fts_update"} | {
        f"messages_fts_{s}" for s in ("data", "idx", "docsize", "config")}
    agent_writes(upgraded, "from_v11", v21=False)
    _integrity(upgraded)
    with SessionDB(upgraded) as db:
        assert [h["session_id"] for h in db.search_messages("kingfisher")] == ["from_v11"]
        assert [m["role"] for m in db.get_messages("from_v11")] == ["user", "tool"]
        assert db.get_session("from_v11")["message_count"] == 2


def test_a_file_an_agent_touched_before_0019_is_cleaned_by_the_upgrade(legacy_db) -> None:
    path = legacy_db(11)
    migrate.upgrade(path, "0018_pg_search_indexes")
    assert v21_agent_open(path) != []  # the old stamp made it migrate again
    agent_writes(path, "doubled", v21=True)
    triggers = {n for t, n, _ in _schema(path) if t == "trigger"}
    assert {"messages_fts_insert", "messages_fts_trigram_insert", "messages_fts_ai"} <= triggers
    # The agent's trigger indexed tool output (into our index: at 0018 it had the agent's name).
    assert _trigram_hits(path, "zebrafinch", "messages_fts_trigram") == 1

    migrate.upgrade(path)
    names = [n for t, n, _ in _schema(path) if t == "trigger"]
    assert not [n for n in names if n.startswith("messages_fts")] and names.count("hs_fts_ai") == 1
    assert _trigram_hits(path, "zebrafinch") == 0
    _integrity(path)
    assert migrate.check(path) == []
    with SessionDB(path) as db:
        assert [h["session_id"] for h in db.search_messages("kingfisher")] == ["doubled"]


FOREIGN = """CREATE TRIGGER other_program_fts AFTER INSERT ON messages BEGIN
    INSERT INTO hs_fts_trigram(rowid, content) VALUES (new.id, new.content);
END"""


def test_check_and_doctor_notice_a_foreign_index_trigger_and_repair_removes_it(
        upgraded: Path) -> None:
    con = sqlite3.connect(upgraded)
    con.execute(FOREIGN)
    con.close()
    agent_writes(upgraded, "seen_twice", v21=True)
    rows = _count(upgraded, "SELECT COUNT(*) FROM messages")

    assert ("foreign_index_trigger", "other_program_fts") in migrate.check(upgraded)
    with engine_mod.reading(engine_mod.open_engine(upgraded, readonly=True)) as conn:
        report = stats.diagnose(conn, upgraded)
    finding = next(f for f in report.findings if f.check == "foreign_triggers")
    assert finding.status == "damage" and "other_program_fts" in finding.detail
    assert finding.fix == "hermes-store repair"
    probe = next(p for p in repair.probe_store(upgraded) if p.name == "foreign_triggers")
    assert probe.ok is False

    result = repair.repair_store(upgraded)
    assert result.healthy, result.to_dict()
    assert any("other_program_fts" in a for a in result.actions)
    assert "other_program_fts" not in {n for t, n, _ in _schema(upgraded) if t == "trigger"}
    assert _trigram_hits(upgraded, "zebrafinch") == 0  # reindexed: its extra entries are gone
    assert _count(upgraded, "SELECT COUNT(*) FROM messages") == rows
    assert migrate.check(upgraded) == []
