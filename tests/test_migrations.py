"""Alembic chain: fresh stores, adoption of every legacy fixture, transactional failure."""

from __future__ import annotations

import json
import shutil
import sqlite3
import textwrap
import threading
from pathlib import Path

import pytest
from backends import column_names, sql, table_names
from conftest import LEGACY_VERSIONS

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading
from hermes_store.errors import SchemaMismatchError
from hermes_store.search.statements import search_messages

# Terms the agent's own store could find through its FTS tables in the fixtures.
WORD_TERMS = ["sysconfig", '"mathematical operator"', "encapsulation"]
TRIGRAM_TERMS = ['"apsulat"', '"パスフレーズ"', '"指令要求"']


def _rows(path: Path, table: str) -> list[dict]:
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def _match(path: Path, table: str, term: str) -> set[int]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (term,))}
    finally:
        con.close()


def _fts_tables(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%'")]
    finally:
        con.close()


def test_empty_store_reaches_head_without_drift(empty_store: str) -> None:
    after = migrate.upgrade(empty_store)
    assert after.state == "up-to-date"
    assert after.current == migrate.head_revision()
    assert migrate.check(empty_store) == []


def test_second_upgrade_writes_nothing(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    wal = Path(f"{head_db}-wal")
    before = (head_db.stat().st_mtime_ns, head_db.stat().st_size, wal.stat().st_size if wal.exists() else 0)
    assert migrate.upgrade(head_db).state == "up-to-date"
    after = (head_db.stat().st_mtime_ns, head_db.stat().st_size, wal.stat().st_size if wal.exists() else 0)
    assert after == before


def test_status_of_a_missing_file_creates_nothing(store_path: Path) -> None:
    assert migrate.status(store_path).state == "missing"
    assert not store_path.exists()


def _untagged(table: str, column: str, value: object) -> object:
    """``model_config`` without the delegate marker the agent's v16 data step adds to files
    written before it (docs/v21.md#open-time-behaviour); every other value as stored."""
    if table != "sessions" or column != "model_config" or '"_delegate_from"' not in str(value):
        return value
    config = json.loads(str(value))
    del config["_delegate_from"]
    return json.dumps(config) if config else None


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_legacy_store_is_adopted_with_every_row_intact(legacy_db, version: int) -> None:
    path = legacy_db(version)
    tables_before = _tables(path)
    canonical = [t for t in tables_before
                 if t not in ("sqlite_sequence", "schema_version") and not t.startswith("messages_fts")]
    before = {t: _rows(path, t) for t in canonical}
    assert migrate.status(path).state == "legacy"

    assert migrate.upgrade(path).state == "up-to-date"

    for table, rows in before.items():
        # Revision 0025 records whether the bigram index holds Latin glued to CJK.
        after = [r for r in _rows(path, table) if r.get("key") != "hs_cjk_glued_latin"]
        assert len(after) == len(rows), table
        for old, new in zip(rows, after, strict=True):
            assert {k: _untagged(table, k, new[k]) for k in old} == old, (table, old.get("id"))
    assert _tables(path) >= set(canonical)
    assert migrate.check(path) == []
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for fts in _fts_tables(path):
            con.execute(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
        # Legacy revisions keep the old marker in step up to 11, as the agent's store did; the
        # upgrade then leaves it at 21, the agent's v21 line's "current"
        # (docs/v21.md#open-time-behaviour).
        assert con.execute("SELECT version FROM schema_version").fetchone()[0] == max(version, 21)
    finally:
        con.close()


def test_newer_upstream_store_keeps_its_own_tables_and_columns(legacy_db) -> None:
    path = legacy_db(21)
    extras = ["session_model_usage", "gateway_routing", "compression_locks", "async_delegations"]
    before = {t: _rows(path, t) for t in extras}
    migrate.upgrade(path)
    for table, rows in before.items():
        assert _rows(path, table) == rows
    con = sqlite3.connect(path)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(sessions)")}
    finally:
        con.close()
    assert {"session_key", "chat_id", "handoff_state", "rewind_count", "pinned", "profile_name"} <= cols


def _covered(path: Path) -> set[int]:
    """Rows the head trigram index covers: those of every session holding a CJK character (it
    answers CJK terms alone)."""
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT id FROM hs_fts_trigram_src")}
    finally:
        con.close()


def _search_ids(path: Path, term: str, **filters) -> set[int]:
    with reading(open_engine(path)) as conn:
        return {hit["id"] for hit in search_messages(conn, term, limit=10_000, **filters)}


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_old_search_terms_are_still_found(legacy_db, version: int) -> None:
    path = legacy_db(version)
    reference = Path(shutil.copy(path, path.with_name(f"ref-{version}.db")))
    migrate.upgrade(path)
    for term in WORD_TERMS:
        expected = _match(reference, "messages_fts", term)
        assert expected, term
        assert _search_ids(path, term) >= expected, term
    if "messages_fts_trigram" in _tables(reference):
        covered = _covered(path)
        for term in TRIGRAM_TERMS:
            expected = _match(reference, "messages_fts_trigram", term)
            assert expected, term
            # Substrings of covered rows stay in the trigram index; CJK terms reach every row
            # of every session, tool output whole with the tool role.
            assert _match(path, "hs_fts_trigram", term) >= expected & covered, term
            if any(ord(ch) > 0x3000 for ch in term):
                bare = term.strip('"')
                assert _search_ids(path, bare) >= expected & covered, term
                assert _search_ids(path, bare) | _search_ids(path, bare, role_filter=["tool"]) \
                    >= expected


def test_a_store_with_tables_but_no_version_is_refused(empty_store: str) -> None:
    sql(open_engine(empty_store), "CREATE TABLE sessions (id TEXT)")
    with pytest.raises(SchemaMismatchError):
        migrate.upgrade(empty_store)
    assert table_names(empty_store) == {"sessions"}


FAILING_REVISION = '''
"""A revision that fails after doing some DDL (test only)."""
from alembic import op

revision = "9999_fails_midway"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("CREATE TABLE half_done (x INTEGER)")
    op.execute("ALTER TABLE sessions ADD COLUMN half_column INTEGER")
    op.execute("INSERT INTO state_meta (key, value) VALUES ('half', 'yes')")
    raise RuntimeError("boom midway")


def downgrade():
    raise NotImplementedError("test revision")
'''


@pytest.fixture
def failing_location(tmp_path: Path) -> str:
    location = tmp_path / "migrations"
    shutil.copytree(migrate.script_location(), location,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (location / "versions" / "9999_fails_midway.py").write_text(
        textwrap.dedent(FAILING_REVISION.format(head=migrate.head_revision())))
    return str(location)


def test_failing_revision_leaves_the_store_at_its_previous_revision(head_store: str,
                                                                   failing_location: str) -> None:
    with pytest.raises(RuntimeError, match="boom midway"):
        migrate.upgrade(head_store, location=failing_location)
    assert migrate.status(head_store).current == migrate.head_revision()
    assert "half_done" not in table_names(head_store)
    assert "half_column" not in column_names(head_store, "sessions")
    assert sql(open_engine(head_store),
               "SELECT * FROM state_meta WHERE key <> 'hs_cjk_glued_latin'") == []


def test_failing_revision_rolls_back_a_whole_legacy_adoption(legacy_db, failing_location: str) -> None:
    path = legacy_db(4)
    columns_before = _rows_columns(path, "sessions")
    with pytest.raises(RuntimeError, match="boom midway"):
        migrate.upgrade(path, location=failing_location)
    assert "alembic_version" not in _tables(path)
    assert _rows_columns(path, "sessions") == columns_before
    assert migrate.status(path).legacy_version == 4


def _rows_columns(path: Path, table: str) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


# --------------------------------------------------------------------------- PostgreSQL


def test_the_alembic_command_line_takes_a_url_or_a_path(empty_store: str) -> None:
    from alembic.config import main as alembic_main

    ini = Path(__file__).resolve().parent.parent / "alembic.ini"
    alembic_main(argv=["-c", str(ini), "-x", f"db={empty_store}", "upgrade", "head"])
    assert migrate.status(empty_store).at_head
    assert migrate.check(empty_store) == []


def test_check_sees_a_column_type_changed_on_the_server(pg_store: str) -> None:
    sql(open_engine(pg_store), "ALTER TABLE messages ALTER COLUMN timestamp TYPE real")
    drift = migrate.check(pg_store)
    assert [op[0][:4] for op in drift] == [("modify_type", None, "messages", "timestamp")]


def test_a_server_store_is_empty_before_and_has_no_legacy_tables_after(pg_empty_store) -> None:
    assert migrate.status(pg_empty_store).state == "empty"
    migrate.upgrade(pg_empty_store)
    assert table_names(pg_empty_store) == {"alembic_version", "sessions", "messages",
                                           "state_meta", "session_model_usage",
                                           "gateway_routing", "compression_locks",
                                           "async_delegations"}


def test_concurrent_upgrades_of_one_server_store_take_turns(pg_empty_store: str) -> None:
    results: list[object] = []

    def up() -> None:
        try:
            results.append(migrate.upgrade(pg_empty_store).state)
        except Exception as err:  # noqa: BLE001 - reported by the assertion
            results.append(err)

    threads = [threading.Thread(target=up) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["up-to-date"] * 3
    assert migrate.check(pg_empty_store) == []
