"""The schema catalog answers what exists in a store: tables, columns, our FTS objects, the search
layout and the backfill window, as plain values, from the caller's connection."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hermes_store.db import catalog, names
from hermes_store.db import derived as layout
from hermes_store.db.engine import open_engine, reading


def _read(path: Path, question):  # type: ignore[no-untyped-def]
    with reading(open_engine(path)) as conn:
        return question(conn)


def _execute(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    with con:
        for statement in statements:
            con.execute(statement)
    con.close()


def test_a_head_store_lists_its_tables_views_and_their_columns(head_db: Path) -> None:
    tables = _read(head_db, catalog.tables)
    assert {"sessions", "messages", "state_meta", "alembic_version", *catalog.FTS_INDEXES} <= tables
    relations = _read(head_db, catalog.relations)
    assert tables < relations and "hs_search_scope" in relations - tables
    assert _read(head_db, lambda c: catalog.has_table(c, "messages"))
    assert not _read(head_db, lambda c: catalog.has_table(c, "hs_search_scope"))
    assert _read(head_db, lambda c: catalog.has_object(c, "view", "hs_search_scope"))
    names = [c.name for c in _read(head_db, lambda c: catalog.columns(c, "messages"))]
    assert names[:3] == ["id", "session_id", "role"] and "content" in names
    assert _read(head_db, lambda c: catalog.columns(c, "no_such_table")) == []


def test_a_table_name_is_bound_never_spliced_into_the_column_query(head_db: Path) -> None:
    _execute(head_db, 'CREATE TABLE "odd""name; DROP TABLE messages" (x INTEGER, y TEXT)')
    cols = _read(head_db, lambda c: catalog.columns(c, 'odd"name; DROP TABLE messages'))
    assert cols == [catalog.Column("x", "INTEGER"), catalog.Column("y", "TEXT")]
    assert "messages" in _read(head_db, catalog.tables)


def test_table_sql_is_the_create_statement_or_none(head_db: Path) -> None:
    sql = _read(head_db, lambda c: catalog.table_sql(c, "hs_fts"))
    assert sql is not None and catalog.is_fts5(sql)
    assert _read(head_db, lambda c: catalog.table_sql(c, "hs_search_scope")) is None


def test_every_fts5_table_is_found_and_shadows_are_not(head_db: Path) -> None:
    _execute(head_db, "CREATE VIRTUAL TABLE user_notes USING fts5(body)")
    found = _read(head_db, catalog.fts5_tables)
    assert set(catalog.FTS_INDEXES) | {"user_notes"} <= set(found)
    assert found == sorted(found)
    assert not {s for t in found for s in catalog.shadow_tables(t)} & set(found)


def test_only_shadows_of_our_own_missing_indexes_count_as_orphans() -> None:
    tables = {"hs_fts", "hs_fts_data", "messages_fts_old_data",
              "messages_fts_old_config", "app_config", "user_index_data"}
    assert catalog.orphan_fts_shadows(tables) == ["messages_fts_old_data",
                                                  "messages_fts_old_config"]


def test_fts_owned_tables_are_virtual_tables_and_any_index_shadows() -> None:
    definitions = {"messages": "CREATE TABLE messages (id)",
                   "notes": "CREATE VIRTUAL TABLE notes USING fts5(x)",
                   "notes_data": "CREATE TABLE 'notes_data'(id, block)",
                   "messages_fts_old_idx": "CREATE TABLE 'messages_fts_old_idx'(segid, term)",
                   "app_config": "CREATE TABLE app_config (k, v)"}
    assert catalog.fts_owned(definitions) == {"notes", "notes_data", "messages_fts_old_idx"}


def test_the_search_layout_of_a_head_store_has_every_index_and_no_window(head_db: Path) -> None:
    found = _read(head_db, catalog.search_layout)
    assert (found.word, found.bigram, found.retired_word, found.retired_trigram) == (
        True, True, False, False)
    assert found.trigram is layout.TRIGRAM_AVAILABLE
    assert found.window is None


def test_a_recorded_window_is_read_through_its_view(head_db: Path) -> None:
    _execute(head_db, "INSERT INTO state_meta (key, value) VALUES "
                      "('hs_backfill_high_water', '10'), ('hs_backfill_progress', '4')")
    assert _read(head_db, catalog.search_layout).window == (4, 10)
    assert _read(head_db, catalog.backfill_window) == (4, 10)


def test_without_the_window_view_there_is_no_window(head_db: Path) -> None:
    _execute(head_db, "INSERT INTO state_meta (key, value) VALUES "
                      "('hs_backfill_high_water', '10'), ('hs_backfill_progress', '4')",
             "DROP VIEW hs_backfill_window")
    assert _read(head_db, catalog.search_layout).window is None
    assert _read(head_db, catalog.backfill_window) is None


def test_a_broken_window_view_fails_instead_of_reading_as_closed(head_db: Path) -> None:
    _execute(head_db, "INSERT INTO state_meta (key, value) VALUES "
                      "('hs_backfill_high_water', '10'), ('hs_backfill_progress', '4')",
             "DROP VIEW hs_backfill_window",
             "CREATE VIEW hs_backfill_window AS SELECT lo, hi FROM lost_window_table")
    for question in (catalog.search_layout, catalog.backfill_window):
        with pytest.raises(sqlite3.OperationalError, match="lost_window_table"):
            _read(head_db, question)


def test_the_window_predicate_is_the_one_the_head_triggers_use() -> None:
    assert f"NOT {catalog.in_backfill_window('new.id')}" in " ".join(layout.TRIGRAM_AI.split())
    assert catalog.in_backfill_window("new.id") in " ".join(layout.WORD_AI.split())


def test_duplicate_catalog_rows_are_listed_then_dropped_down_to_the_first(head_db: Path) -> None:
    con = sqlite3.connect(head_db, isolation_level=None)
    try:
        con.execute("PRAGMA writable_schema=ON")
        con.execute("INSERT INTO sqlite_master SELECT * FROM sqlite_master "
                    "WHERE type = 'index' AND name = 'idx_messages_session'")
        assert catalog.duplicate_entries(con) == [("index", "idx_messages_session", 2)]
        con.execute("BEGIN IMMEDIATE")
        catalog.drop_duplicate_entries(con, "index", "idx_messages_session")
        con.execute("COMMIT")
        assert catalog.duplicate_entries(con) == []
        con.execute("PRAGMA writable_schema=RESET")
    finally:
        con.close()
    con = sqlite3.connect(head_db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


def test_a_plain_sqlite3_connection_gets_the_same_answers(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    try:
        assert catalog.tables(con) == _read(head_db, catalog.tables)
        assert catalog.table_definitions(con)["messages"].startswith("CREATE TABLE")
        assert catalog.columns(con, "sessions") == _read(
            head_db, lambda c: catalog.columns(c, "sessions"))
    finally:
        con.close()


def test_a_sqlite_table_declares_its_columns_and_foreign_keys(head_db: Path) -> None:
    _execute(head_db, 'CREATE TABLE "odd""kids" (id INTEGER PRIMARY KEY, '
             "session_id TEXT NOT NULL DEFAULT 'x' REFERENCES sessions(id) ON DELETE CASCADE, "
             "note TEXT)")
    cols = _read(head_db, lambda c: catalog.column_definitions(c, 'odd"kids'))
    assert cols == [catalog.ColumnDefinition("id", "INTEGER", False, None),
                    catalog.ColumnDefinition("session_id", "TEXT", True, "'x'"),
                    catalog.ColumnDefinition("note", "TEXT", False, None)]
    keys = _read(head_db, lambda c: catalog.foreign_keys(c, 'odd"kids'))
    assert keys == [catalog.ForeignKey("sessions", "session_id", "CASCADE")]
    assert _read(head_db, lambda c: catalog.foreign_keys(c, "state_meta")) == []
    assert _read(head_db, lambda c: catalog.column_definitions(c, "no_such_table")) == []


def test_a_server_lists_its_gin_search_indexes_and_no_other(pg_store: str) -> None:
    found = _read(pg_store, catalog.gin_indexes)
    assert {names.PG_WORD_INDEX, names.PG_TRIGRAM_INDEX, names.PG_CJK_INDEX} <= set(found)
    assert found == sorted(found) and "idx_messages_session" not in found
