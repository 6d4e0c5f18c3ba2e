"""The compact FTS layout at head: what is indexed, and consistency under plain SQL from any
client."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hermes_store.content import text_of
from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.ops import storage
from hermes_store.repo import bigrams as cjk
from hermes_store.search.statements import search_messages

INDEXES = ("hs_fts", "hs_fts_trigram", "hs_fts_cjk")


def connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA foreign_keys = ON")
    return con


def integrity(path: Path) -> dict[str, str]:
    with reading(open_engine(path)) as conn:
        return storage.integrity_problems(conn)


def catch_up(path: Path) -> None:
    run_write(open_engine(path), lambda c: cjk.catch_up(c, 100_000))


def side_rows(path: Path) -> dict[int, tuple[str, str | None]]:
    with connect(path) as con:
        return {r[0]: (r[1], r[2]) for r in con.execute("SELECT id, text, calls FROM hs_cjk")}


def expected_side_rows(path: Path) -> dict[int, tuple[str, str | None]]:
    """What the CJK side table must hold, derived in Python from the canonical rows."""
    out = {}
    with connect(path) as con:
        rows = con.execute(
            "SELECT id, role, content, tool_name, tool_calls FROM messages").fetchall()
    for row_id, role, content, tool_name, tool_calls in rows:
        text = text_of(content)
        side = cjk.side_row(text[:8192] if role == "tool" else text, tool_name, tool_calls)
        if side is not None:
            out[row_id] = side
    return out


@pytest.fixture
def store(head_db: Path) -> Path:
    with connect(head_db) as con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', 1), "
                    "('b', 'cron', 2), ('c', 'telegram', 3)")
        rows = [("a", "user", "记忆断裂 in the docker logs", None, None),
                ("a", "assistant", "fixed it", None, '[{"name": "terminal"}]'),
                ("a", "tool", "y" * 10_000 + " beyondprefix", "terminal", None),
                ("b", "user", "定时任务 nightly report", None, None),
                ("c", "user", "旅游 plans", None, None)]
        for n, row in enumerate(rows):
            con.execute("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
                        "timestamp) VALUES (?, ?, ?, ?, ?, ?)", (*row, 10.0 + n))
    catch_up(head_db)
    return head_db


def test_head_has_three_external_content_indexes_and_no_text_copy(store: Path) -> None:
    with connect(store) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for name in INDEXES:
            assert name in tables
            assert name + "_content" not in tables  # no inline copy of the text
        sql = {r[0]: r[1] for r in con.execute("SELECT name, sql FROM sqlite_master")}
    assert "content='hs_fts_src'" in sql["hs_fts"]
    assert "tokenize='trigram'" in sql["hs_fts_trigram"]
    assert "tool_calls" not in sql["hs_fts_trigram"]
    assert "content='hs_cjk'" in sql["hs_fts_cjk"]
    assert integrity(store) == {}


def test_tool_rows_are_word_indexed_by_their_first_8192_characters(store: Path) -> None:
    with connect(store) as con:
        [(length,)] = con.execute(
            "SELECT length(content) FROM hs_fts_src WHERE id = 3").fetchall()
        assert length == 8192
        assert con.execute("SELECT rowid FROM hs_fts WHERE hs_fts MATCH 'beyondprefix'"
                           ).fetchall() == []


def test_trigram_holds_the_cjk_rows_of_every_session_and_tool_output(store: Path) -> None:
    # It answers CJK terms alone: a row without a CJK character could never be its hit.
    with connect(store) as con:
        con.execute("INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
                    "VALUES ('b', 'tool', ?, 'terminal', 20)", ("输出结果 " + "z" * 9000 + " 深处的词",))
        assert {r[0] for r in con.execute("SELECT id FROM hs_fts_trigram_src")} == {1, 4, 5, 6}
        assert con.execute("SELECT rowid FROM hs_fts_trigram "
                           "WHERE hs_fts_trigram MATCH '\"输出结果\"'").fetchall() == [(6,)]
        assert con.execute("SELECT rowid FROM hs_fts_trigram "
                           "WHERE hs_fts_trigram MATCH '\"深处的词\"'").fetchall() == []
    assert integrity(store) == {}


def test_cjk_side_rows_cover_cjk_text_of_every_session(store: Path) -> None:
    rows = side_rows(store)
    assert set(rows) == {1, 4, 5}
    assert rows[1][0] == "记忆 忆断 断裂 裂\ue000 in the docker logs"
    assert rows == expected_side_rows(store)


def test_flag_updates_never_touch_an_index(store: Path) -> None:
    def snapshot() -> list:
        with connect(store) as con:
            return [con.execute(f"SELECT * FROM {t}").fetchall() for t in (
                "hs_fts_data", "hs_fts_trigram_data", "hs_fts_cjk_data",
                "hs_cjk", "hs_cjk_pending")]

    before = snapshot()
    with connect(store) as con:
        con.execute("UPDATE messages SET active = 0, compacted = 1, token_count = 7")
        con.execute("UPDATE messages SET content = content, tool_name = tool_name")  # no change
        con.execute("UPDATE sessions SET archived = 1, pinned = 1, title = 'x' || id")
    assert snapshot() == before


def test_update_triggers_name_only_the_indexed_columns(store: Path) -> None:
    with connect(store) as con:
        triggers = [r[0] for r in con.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages' "
            "AND sql LIKE '%UPDATE%ON messages%'")]
    assert triggers
    assert all("UPDATE OF" in sql and "IS NOT new." in sql for sql in triggers)


def test_plain_sql_writes_from_any_client_keep_every_index_consistent(store: Path) -> None:
    with connect(store) as con:
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('a', 'user', '新的消息 about kubernetes', 20)")
        con.execute("UPDATE messages SET content = '改过的内容 rewritten' WHERE id = 1")
        con.execute("UPDATE messages SET role = 'tool' WHERE id = 5")
        con.execute("UPDATE messages SET session_id = 'b' WHERE id = 2")
        con.execute("UPDATE messages SET content = '工具 output' WHERE id = 3")
        con.execute("DELETE FROM messages WHERE id = 4")
        con.execute("UPDATE sessions SET source = 'subagent' WHERE id = 'c'")
        con.execute("UPDATE sessions SET source = 'cli' WHERE id = 'b'")
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('b', 'user', '任务 resumed', 21)")
    assert integrity(store) == {}
    with connect(store) as con:
        pending = {r[0] for r in con.execute("SELECT id FROM hs_cjk_pending")}
    assert pending  # recorded by plain triggers, for the library to derive
    assert 1 not in side_rows(store)  # stale bigrams never outlive the text they came from
    catch_up(store)
    assert side_rows(store) == expected_side_rows(store)
    assert integrity(store) == {}
    with reading(open_engine(store)) as conn:
        assert [h["id"] for h in search_messages(conn, "改过")] == [1]
        assert [h["id"] for h in search_messages(conn, "记忆")] == []
        assert [h["id"] for h in search_messages(conn, "任务")] == [7]


def test_deleting_a_session_before_its_messages_keeps_indexes_consistent(store: Path) -> None:
    con = sqlite3.connect(store, isolation_level=None)  # foreign keys off, as old clients run
    con.execute("DELETE FROM sessions WHERE id = 'a'")
    con.execute("DELETE FROM messages WHERE id = 1")
    con.close()
    assert integrity(store) == {}
    assert side_rows(store) == expected_side_rows(store)


def test_sync_messages_is_the_writers_path_and_clears_pending(store: Path) -> None:
    def append(conn) -> int:
        new_id = conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('a', 'user', '写入路径 test', 30)").lastrowid
        cjk.sync_messages(conn, [new_id])
        return new_id

    new_id = run_write(open_engine(store), append)
    assert side_rows(store)[new_id][0].startswith("写入 入路 路径 径\ue000")
    with connect(store) as con:
        assert con.execute("SELECT count(*) FROM hs_cjk_pending").fetchone()[0] == 0


def test_writers_drain_rows_other_programs_left_pending(store: Path) -> None:
    with connect(store) as con:
        for n in range(5):
            con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('a', 'user', ?, ?)", (f"别的程序 {n}", 40 + n))
    with reading(open_engine(store)) as conn:
        assert cjk.pending_count(conn) == 5
    run_write(open_engine(store), lambda c: cjk.sync_messages(c, [1]))
    with reading(open_engine(store)) as conn:
        assert cjk.pending_count(conn) == 0
    assert side_rows(store) == expected_side_rows(store)


def test_multimodal_payloads_are_never_indexed(store: Path) -> None:
    content = "\x00json:" + json.dumps([{"type": "text", "text": "see 图片 here"},
                                        {"type": "image_url", "image_url": {"url": "data:AAAA"}}])
    with connect(store) as con:
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('a', 'user', ?, 50)", (content,))
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('a', 'user', ?, 51)", ("\x00json:{broken",))
        src = dict(con.execute("SELECT id, content FROM hs_fts_src WHERE id > 5"))
    assert list(src.values()) == ["see 图片 here", ""]
    catch_up(store)
    assert integrity(store) == {}
    with connect(store) as con:
        for table, term in (("hs_fts", "AAAA"), ("hs_fts", "image_url"),
                            ("hs_fts_trigram", '"data"')):
            assert con.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?",
                               (term,)).fetchall() == []


def test_rebuild_indexes_reproduces_the_same_content(store: Path) -> None:
    before = side_rows(store)
    run_write(open_engine(store), storage.rebuild_indexes)
    assert side_rows(store) == before
    assert integrity(store) == {}


# --------------------------------------------------------------------------- adopting layouts

UPSTREAM_COMPACT = [
    "DROP TRIGGER messages_fts_insert", "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_update", "DROP TRIGGER messages_fts_trigram_insert",
    "DROP TRIGGER messages_fts_trigram_delete", "DROP TRIGGER messages_fts_trigram_update",
    "DROP TABLE messages_fts", "DROP TABLE messages_fts_trigram",
    "CREATE VIEW messages_fts_src AS SELECT id, content, tool_name, tool_calls FROM messages",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls, "
    "content='messages_fts_src', content_rowid='id')",
    "CREATE TRIGGER msg_fts_ai AFTER INSERT ON messages BEGIN INSERT INTO messages_fts"
    "(rowid, content, tool_name, tool_calls) VALUES (new.id, new.content, new.tool_name, "
    "new.tool_calls); END",
    "CREATE TRIGGER msg_cjk_touch AFTER UPDATE ON messages BEGIN "
    "INSERT INTO messages_fts_cjk(rowid, content) VALUES (new.id, new.content); END",
]


def test_upstream_compact_layout_with_an_unloadable_tokenizer_is_replaced(store_path: Path) -> None:
    migrate.upgrade(store_path, "0012_newer_session_columns")
    con = sqlite3.connect(store_path, isolation_level=None)
    for stmt in UPSTREAM_COMPACT:
        con.execute(stmt)
    # A bigram table built with a native tokenizer this runtime cannot load.
    con.execute("PRAGMA writable_schema = ON")
    con.execute("INSERT INTO sqlite_master VALUES ('table', 'messages_fts_cjk', "
                "'messages_fts_cjk', 0, 'CREATE VIRTUAL TABLE messages_fts_cjk USING "
                "fts5(content, tokenize=''hermes_bigram'')')")
    con.execute("PRAGMA writable_schema = OFF")
    con.close()
    con = sqlite3.connect(store_path, isolation_level=None)
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', 1)")
    con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('a', 'user', 'upstream 桂林 row', 1)")
    con.close()

    assert migrate.upgrade(store_path).at_head
    with connect(store_path) as con:
        triggers = {r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert not {"msg_fts_ai", "msg_cjk_touch"} & triggers
        con.execute("UPDATE messages SET content = 'upstream 桂林 row, edited' WHERE id = 1")
    catch_up(store_path)
    assert integrity(store_path) == {}
    with reading(open_engine(store_path)) as conn:
        assert [h["id"] for h in search_messages(conn, "桂林")] == [1]
        assert [h["id"] for h in search_messages(conn, "edited")] == [1]


def test_orphan_shadow_tables_do_not_block_the_upgrade(store_path: Path) -> None:
    migrate.upgrade(store_path, "0012_newer_session_columns")
    with connect(store_path) as con:
        con.execute("CREATE TABLE messages_fts_cjk_data (id INTEGER PRIMARY KEY, block BLOB)")
        con.execute("CREATE TABLE messages_fts_cjk_config (k PRIMARY KEY, v) WITHOUT ROWID")
    assert migrate.upgrade(store_path).at_head
    assert integrity(store_path) == {}


# --------------------------------------------------------------------------- FTS5's own commands

FTS5_COMMANDS = ("INSERT INTO {t} ({t}) VALUES ('rebuild')",
                 "INSERT INTO {t} ({t}) VALUES ('integrity-check')",
                 "INSERT INTO {t} ({t}, rank) VALUES ('integrity-check', 1)",
                 "INSERT INTO {t} ({t}) VALUES ('optimize')",
                 "INSERT INTO {t} ({t}, rank) VALUES ('merge', 16)")


@pytest.mark.parametrize("index", INDEXES)
def test_fts5_own_commands_work_on_every_index_from_a_plain_client(store: Path,
                                                                    index: str) -> None:
    # A multimodal row (the JSON-part text the views once read through json_each), an edit of
    # it to plain text and back, and a deleted row: the index must still match its source.
    parts = '\x00json:[{"type": "text", "text": "漢字 multimodal words"}, {"type": "image_url"}]'
    with connect(store) as con:
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('a', 'user', ?, 60)", (parts,))
        con.execute("UPDATE messages SET content = 'plain now' WHERE id = 1")
        con.execute("UPDATE messages SET content = ? WHERE id = 1", (parts,))
        con.execute("DELETE FROM messages WHERE id = 2")
    catch_up(store)
    with connect(store) as con:
        for stmt in FTS5_COMMANDS:
            con.execute(stmt.format(t=index))
    assert integrity(store) == {}
    with reading(open_engine(store)) as conn:
        assert {h["id"] for h in search_messages(conn, "multimodal")} == {1, 6}
        assert {h["id"] for h in search_messages(conn, "漢字")} == {1, 6}
