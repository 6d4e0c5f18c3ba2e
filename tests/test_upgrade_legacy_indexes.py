"""An upgrade builds no index that a later revision of the same run retires: a store from before
the agent's v10 does not get the v10 trigram twin or the v11 inline copies on its way to head,
and a v9 → v11 upgrade back-fills the trigram index once. ``upgrade --dry-run`` says what the
upgrade will cost (docs/contracts.md#legacy-stores, docs/cli.md#schema)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from cli_support import run, run_json
from sqlalchemy import event

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate

# More messages than revision 0013 indexes inside the upgrade (its SMALL_STORE_ROWS).
LARGE = 5200


def _agent_v9(legacy_db, extra_rows: int = 0) -> Path:
    """A store as the agent's v9 left it: the v6 file brought to 0009 by the legacy revisions
    (which reproduce the agent's DDL), its Alembic stamp removed, compacted."""
    path = legacy_db(6)
    migrate.upgrade(path, "0009_v9_codex_items")
    engine_mod.dispose_all()
    con = sqlite3.connect(path)
    con.execute("DROP TABLE alembic_version")
    con.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp) "
        "SELECT id, 'user', ?, started_at + 1 FROM sessions LIMIT 1",
        [(f"bulk row {n} capybara",) for n in range(extra_rows)])
    con.commit()
    con.execute("VACUUM")
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(9,)]
    con.close()
    return path


@pytest.fixture
def statements() -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn, cursor, statement, *args) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(sa.engine.Engine, "before_cursor_execute", record)
    yield seen
    event.remove(sa.engine.Engine, "before_cursor_execute", record)


def _fills(seen: list[str], table: str) -> list[str]:
    """Statements that fill ``table`` from the whole of ``messages``."""
    return [s for s in seen if s.startswith(f"INSERT INTO {table}(rowid, content) SELECT")]


def test_v9_to_v11_fills_the_trigram_index_once(legacy_db, statements: list[str]) -> None:
    path = _agent_v9(legacy_db)
    migrate.upgrade(path, "0011_v11_inline_fts")
    assert len(_fills(statements, "messages_fts_trigram")) == 1  # v11's, not v10's too
    con = sqlite3.connect(path)
    count = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert con.execute("SELECT count(*) FROM messages_fts_trigram").fetchone()[0] == count
    con.close()


def test_v9_to_head_builds_no_legacy_index_and_stays_small(legacy_db,
                                                           statements: list[str]) -> None:
    path = _agent_v9(legacy_db)
    before = path.stat().st_size
    migrate.upgrade(path)
    engine_mod.checkpoint(engine_mod.open_engine(path), "TRUNCATE")
    assert _fills(statements, "messages_fts_trigram") == []
    assert _fills(statements, "messages_fts") == []
    assert path.stat().st_size <= 1.5 * before
    with SessionDB(path) as db:
        for term in ("sysconfig", "encapsulation", '"mathematical operator"', "パスフレーズ"):
            assert db.search_messages(term), term  # words, a phrase, a CJK term


def test_a_large_v9_store_is_upgraded_without_copying_its_text(
        legacy_db, statements: list[str]) -> None:
    path = _agent_v9(legacy_db, extra_rows=LARGE)
    before = path.stat().st_size
    migrate.upgrade(path)
    engine_mod.checkpoint(engine_mod.open_engine(path), "TRUNCATE")
    assert not [s for s in statements if s.startswith("INSERT INTO messages_fts")]
    assert path.stat().st_size <= 1.1 * before
    with SessionDB(path) as db:  # the rows wait in the backfill window and are still found
        assert len(db.search_messages("capybara", limit=10)) == 10


def test_dry_run_says_how_long_and_how_much_disk_a_large_upgrade_takes(legacy_db) -> None:
    path = _agent_v9(legacy_db, extra_rows=LARGE)
    before = path.read_bytes()
    code, doc = run_json("--db", str(path), "upgrade", "--dry-run")
    assert code == 0 and path.read_bytes() == before
    cost = doc["estimate"]
    assert cost["messages"] > LARGE and cost["large"] is True
    assert cost["indexed_text_bytes"] > 0 and "per MB" in cost["basis"]
    # The index build is left to optimize-storage: the upgrade itself copies no text.
    assert cost["upgrade_bytes"] == 0
    assert cost["backfill_seconds"] > 0 and cost["backfill_bytes"] > 0
    human = run("--db", str(path), "upgrade", "--dry-run").stdout
    assert "estimate (" in human and "optimize-storage" in human


def test_dry_run_of_a_small_store_counts_the_indexing_in_the_upgrade(legacy_db) -> None:
    code, doc = run_json("--db", str(_agent_v9(legacy_db)), "upgrade", "--dry-run")
    cost = doc["estimate"]
    assert code == 0 and cost["large"] is False
    assert cost["upgrade_bytes"] > 0 and cost["backfill_bytes"] == 0
