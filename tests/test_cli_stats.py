"""hermes-store stats and doctor: read-only reports with advice that names a command."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_support import add_session, execute, on_server, run, run_json, sha256, store_exists
from sqlalchemy import select

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading
from hermes_store.ops import stats
from hermes_store.ops.stats import has_wal_reset_bug, wal_state
from hermes_store.repo import lineage


@pytest.fixture
def upgraded_v11(legacy_db) -> Path:
    path = legacy_db(11)
    migrate.upgrade(path)
    return path


def test_stats_counts_sessions_messages_and_every_source_by_count(upgraded_v11: Path) -> None:
    code, doc = run_json("--db", str(upgraded_v11), "stats")
    assert code == 0
    assert (doc["ok"], doc["command"], doc["format"]) == (True, "stats", 1)
    assert doc["sessions"]["total"] == 16 and doc["messages"]["total"] == 358
    assert doc["sessions"]["open"] + doc["sessions"]["ended"] == 16
    counts = [s["sessions"] for s in doc["sources"]]
    assert counts == sorted(counts, reverse=True) and sum(counts) == 16
    con = sqlite3.connect(upgraded_v11)
    present = {r[0] for r in con.execute("SELECT DISTINCT source FROM sessions")}
    con.close()
    assert {s["source"] for s in doc["sources"]} == present


def test_stats_reports_oldest_and_newest_as_iso_utc(upgraded_v11: Path) -> None:
    _, doc = run_json("--db", str(upgraded_v11), "stats")
    assert doc["oldest"]["started_at"].endswith("Z")
    assert doc["oldest"]["started_at"] <= doc["newest"]["started_at"]
    assert doc["oldest_open"]["id"]


def test_stats_gives_bytes_per_table_and_index_and_the_fts_share(upgraded_v11: Path) -> None:
    _, doc = run_json("--db", str(upgraded_v11), "stats")
    space = doc["space"]
    assert space["available"] is True
    kinds = {i["name"]: i["kind"] for i in space["items"]}
    assert kinds["messages"] == "table" and kinds["idx_messages_session"] == "index"
    assert any(kind == "fts" for kind in kinds.values())
    assert 0 < space["fts_share"] < 1


def test_stats_on_a_missing_file_is_not_found_and_on_an_empty_database_empty(
        empty_store: str) -> None:
    result = run("--db", empty_store, "stats")
    assert result.exit_code == (0 if on_server(empty_store) else 3), result.output
    assert ("is empty" if on_server(empty_store) else "no store at") in result.stderr
    assert not store_exists(empty_store)


def test_stats_on_a_store_behind_the_code_says_upgrade_and_changes_nothing(legacy_db) -> None:
    path = legacy_db(6)
    before = sha256(path)
    result = run("--db", str(path), "stats")
    assert result.exit_code == 6
    assert "hermes-store upgrade" in result.stderr
    assert sha256(path) == before


def test_a_fully_checkpointed_wal_is_not_reported_as_pending(head_db: Path) -> None:
    keeper = sqlite3.connect(head_db)  # keeps the WAL file alive between writes
    add_session(head_db, "s1", 50)
    assert wal_state(head_db).state == "pending"
    keeper.execute("PRAGMA wal_checkpoint(PASSIVE)")
    state = wal_state(head_db)
    assert state.state == "checkpointed" and state.bytes > 0 and state.pending_frames == 0
    _, doc = run_json("--db", str(head_db), "stats")
    assert doc["wal"]["state"] == "checkpointed"
    assert not any("WAL" in a["message"] for a in doc["advice"])
    keeper.close()


def test_a_large_freelist_advises_compact(head_db: Path) -> None:
    add_session(head_db, "big", 400, text="x" * 2000)
    con = sqlite3.connect(head_db)
    with con:
        con.execute("DELETE FROM messages")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    _, doc = run_json("--db", str(head_db), "stats")
    assert doc["freelist_ratio"] >= 0.2
    assert any(a["command"] == "hermes-store compact" for a in doc["advice"])


def test_a_pending_backfill_is_reported_from_state_meta_markers(head_db: Path) -> None:
    add_session(head_db, "s1", 10)
    con = sqlite3.connect(head_db)
    with con:
        con.executemany("INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?)",
                        [("hs_backfill_high_water", "10"), ("hs_backfill_progress", "4")])
    con.close()
    _, doc = run_json("--db", str(head_db), "stats")
    backfill = doc["layout"]["backfill"]
    assert backfill["pending"] is True and (backfill["done"], backfill["total"]) == (4, 10)
    assert any(a["command"] == "hermes-store optimize-storage" for a in doc["advice"])
    # The window is searched through the retired index or LIKE: nothing is missed.
    assert not any("miss" in a["message"] for a in doc["advice"])


def test_human_stats_prints_counts_sources_and_advice(upgraded_v11: Path) -> None:
    result = run("--db", str(upgraded_v11), "stats")
    assert result.exit_code == 0
    assert "sessions  16" in result.stdout and "cron" in result.stdout
    assert "FTS share" in result.stdout


# --------------------------------------------------------------------------- doctor


def test_doctor_on_a_healthy_store_exits_0_and_writes_nothing(head_db: Path) -> None:
    add_session(head_db, "s1", 5)
    con = sqlite3.connect(head_db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    before = sha256(head_db)
    code, doc = run_json("--db", str(head_db), "doctor")
    assert code == 0, doc
    assert doc["damaged"] is False
    checks = {f["check"] for f in doc["findings"]}
    assert {"schema", "quick_check", "wal", "never_ended", "sqlite_version", "holders"} <= checks
    assert any(c.startswith("fts:") for c in checks)
    assert sha256(head_db) == before


def test_doctor_finds_a_damaged_fts_index_and_exits_7(head_db: Path) -> None:
    add_session(head_db, "s1", 300, text="some words to index " * 20)
    con = sqlite3.connect(head_db)
    with con:
        con.execute("UPDATE hs_fts_data SET block = randomblob(length(block)) "
                    "WHERE id IN (SELECT id FROM hs_fts_data WHERE id > 10 LIMIT 3)")
    con.close()
    code, doc = run_json("--db", str(head_db), "doctor")
    assert code == 7
    bad = [f for f in doc["findings"] if f["status"] == "damage"]
    assert bad and bad[0]["check"] == "fts:hs_fts" and bad[0]["fix"]


def test_doctor_on_a_store_without_its_first_page_names_recover(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 4096 + b"this is not a database at all" * 200)
    result = run("--db", str(path), "doctor")
    assert result.exit_code == 7
    assert "recover" in result.stdout


def test_doctor_on_a_store_behind_the_code_exits_6(legacy_db) -> None:
    result = run("--db", str(legacy_db(10)), "doctor")
    assert result.exit_code == 6
    assert "hermes-store upgrade" in result.stdout


@pytest.mark.parametrize(("version", "affected"), [
    ((3, 40, 1), True), ((3, 45, 1), True), ((3, 46, 1), True), ((3, 44, 6), False),
    ((3, 50, 7), False), ((3, 51, 2), True), ((3, 51, 3), False), ((3, 52, 0), False),
])
def test_the_wal_reset_bug_is_flagged_by_version(version: tuple[int, int, int],
                                                 affected: bool) -> None:
    assert has_wal_reset_bug(version) is affected


def test_idle_open_sessions_judges_activity_like_every_listing(head_store: str) -> None:
    now = 1_800_000_000.0
    for sid, started, active in [
            ("idle", now - 3 * 86400, None),
            ("active", now - 3 * 86400, now - 60),
            # Only garbage timestamps: the shared expression falls back to started_at as is.
            ("clock_skewed", now + 10 * 365 * 86400, None)]:
        execute(head_store, "INSERT INTO sessions (id, source, started_at, last_activity_at) "
                "VALUES (:sid, 'cli', :started, :active)", sid=sid, started=started,
                active=active)
    engine = open_engine(head_store)
    with reading(engine) as conn:
        assert stats.idle_open_sessions(conn, now=now) == 1
        shared = conn.execute(
            select(lineage.sessions.c.id).where(
                lineage.sessions.c.ended_at.is_(None),
                lineage.last_activity(lineage.sessions, now) < now - stats.IDLE_OPEN_S)).all()
    assert [r.id for r in shared] == ["idle"]


def test_the_layout_is_read_from_the_schema(head_db: Path, legacy_db) -> None:
    def layout_of(path: Path) -> str:
        with reading(open_engine(path, readonly=True)) as conn:
            return stats.layout_info(conn)["version"]

    assert layout_of(head_db) == "compact"
    assert layout_of(legacy_db(11)) == "legacy (inline)"
    con = sqlite3.connect(head_db)
    con.execute("DROP VIEW hs_search_scope")
    con.close()
    assert "incomplete" in layout_of(head_db) and "repair" in layout_of(head_db)
    assert layout_of(legacy_db(6)) == "legacy (external content)"
