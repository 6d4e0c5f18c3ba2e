"""The agent's probe and schema repair: ``_db_opens_cleanly`` tells healthy, fresh, locked and
broken apart; ``repair_state_db_schema`` backs up, then stops at the first step that works
(docs/v21.md#module-names)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import held_by_other_process, sha256

from hermes_store import SessionDB
from hermes_store.compat import _db_opens_cleanly, repair_state_db_schema
from hermes_store.db import engine as engine_mod

BACKUP = re.compile(r"^store\.db\.malformed-backup-\d{8}_\d{6}$")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        for n in range(30):
            db.append_message("s1", "user", f"alpha beta gamma {n}")
    engine_mod.dispose_all()  # the probe and repair work on the file alone
    yield path


def _sql(path: Path, *statements: str, writable_schema: bool = False) -> None:
    con = sqlite3.connect(path)
    if writable_schema:
        con.execute("PRAGMA writable_schema=ON")
    with con:
        for statement in statements:
            con.execute(statement)
    con.close()


def _rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema=ON")  # readable even with a broken schema
    try:
        return (con.execute("SELECT id, source FROM sessions ORDER BY id").fetchall(),
                con.execute("SELECT id, content FROM messages ORDER BY id").fetchall())
    finally:
        con.close()


def _backups(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if ".malformed-backup-" in p.name)


def _searchable(path: Path) -> int:
    with SessionDB(path) as db:
        return len(db.search_messages("gamma", limit=100))


# --------------------------------------------------------------------------- the probe


def test_a_healthy_store_probes_clean_and_the_probe_leaves_no_trace(store: Path) -> None:
    before = _rows(store)
    assert _db_opens_cleanly(store) is None
    assert _rows(store) == before


def test_a_missing_file_is_a_reason_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    assert _db_opens_cleanly(missing) == f"{missing} does not exist"
    assert not missing.exists()


def test_a_fresh_file_is_not_damage(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert _db_opens_cleanly(empty) is None


def test_a_trigger_that_outlived_its_table_is_damage_not_a_fresh_store(store: Path) -> None:
    _sql(store, "DROP TABLE hs_fts")
    assert "no such table" in (_db_opens_cleanly(store) or "")


def test_an_index_rejecting_writes_is_found_by_the_write_probe(store: Path) -> None:
    _sql(store, "UPDATE hs_fts_data SET block = X'0000' WHERE id = 10")
    reason = _db_opens_cleanly(store)
    assert reason is not None
    con = sqlite3.connect(store)
    assert con.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1  # reads pass
    con.close()


def test_a_lock_is_reported_and_never_repaired(store: Path) -> None:
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert "locked" in (_db_opens_cleanly(store) or "")
        before = sha256(store)
        result = repair_state_db_schema(store)
        assert result == {"repaired": False, "strategy": None, "backup_path": None,
                          "error": "database is locked"}
        assert sha256(store) == before and _backups(store) == []
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# --------------------------------------------------------------------------- the repair


def test_repairing_a_missing_file_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    assert repair_state_db_schema(missing) == {
        "repaired": False, "strategy": None, "backup_path": None,
        "error": f"{missing} does not exist"}
    assert not missing.exists()


def test_a_healthy_store_is_already_healthy_and_not_backed_up(store: Path) -> None:
    assert repair_state_db_schema(store) == {
        "repaired": True, "strategy": "already_healthy", "backup_path": None, "error": None}
    assert _backups(store) == []


def test_an_index_rejecting_writes_is_rebuilt(store: Path) -> None:
    before = _rows(store)
    _sql(store, "UPDATE hs_fts_data SET block = X'0000' WHERE id = 10")
    result = repair_state_db_schema(store)
    assert result["repaired"] is True and result["strategy"] == "rebuild_fts"
    assert result["error"] is None
    assert BACKUP.match(Path(result["backup_path"]).name)
    assert _rows(store) == before
    assert _db_opens_cleanly(store) is None
    assert _searchable(store) == 30


def test_duplicate_schema_rows_are_removed_keeping_the_first(store: Path) -> None:
    before = _rows(store)
    _sql(store, "INSERT INTO sqlite_master SELECT * FROM sqlite_master "
                "WHERE name = 'hs_fts'", writable_schema=True)
    assert "malformed database schema" in (_db_opens_cleanly(store) or "")
    result = repair_state_db_schema(store)
    assert (result["repaired"], result["strategy"]) == (True, "dedup_schema")
    assert _rows(store) == before
    assert _searchable(store) == 30


def test_a_search_layout_past_rebuilding_is_dropped_and_the_next_open_rebuilds_it(
        store: Path) -> None:
    before = _rows(store)
    _sql(store, "DROP TABLE hs_fts")
    result = repair_state_db_schema(store)
    assert (result["repaired"], result["strategy"]) == (True, "drop_fts_rebuild")
    con = sqlite3.connect(store)
    assert con.execute("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'hs_fts%'"
                       ).fetchone()[0] == 0
    con.close()
    assert _rows(store) == before
    assert _searchable(store) == 30


def test_the_backup_is_raw_copies_of_the_file_and_its_sidecars(store: Path) -> None:
    keeper = sqlite3.connect(store)  # keeps the -wal and -shm in place while we copy
    keeper.execute("SELECT 1").fetchall()
    _sql(store, "UPDATE hs_fts_data SET block = X'0000' WHERE id = 10")
    original = store.read_bytes()
    wal = Path(f"{store}-wal").read_bytes() if Path(f"{store}-wal").exists() else None
    result = repair_state_db_schema(store)
    keeper.close()
    backup = Path(result["backup_path"])
    assert BACKUP.match(backup.name)
    assert backup.read_bytes() == original
    if wal is not None:
        assert Path(f"{backup}-wal").read_bytes() == wal
    assert Path(f"{store}-wal").exists() or wal is None  # sidecars never moved


def test_without_backup_nothing_is_copied(store: Path) -> None:
    _sql(store, "UPDATE hs_fts_data SET block = X'0000' WHERE id = 10")
    result = repair_state_db_schema(store, backup=False)
    assert result["repaired"] is True and result["backup_path"] is None
    assert _backups(store) == []


def test_an_unrepairable_schema_reports_the_last_reason(store: Path) -> None:
    _sql(store, "UPDATE sqlite_master SET sql = 'CREATE TABLE sessions(' WHERE name = 'sessions'",
         writable_schema=True)
    result = repair_state_db_schema(store)
    assert result["repaired"] is False and result["strategy"] is None
    assert "malformed database schema" in result["error"]
    assert result["backup_path"] is not None


def test_a_store_held_by_another_process_is_refused(store: Path) -> None:
    _sql(store, "UPDATE hs_fts_data SET block = X'0000' WHERE id = 10")
    before = sha256(store)
    with held_by_other_process(store, raw=True) as pid:
        result = repair_state_db_schema(store)
    assert result["repaired"] is False and str(pid) in result["error"]
    assert sha256(store) == before and _backups(store) == []
