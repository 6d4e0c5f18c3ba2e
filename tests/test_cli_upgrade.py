"""upgrade's safeguards: --dry-run, a bounded online backup before any change, held-store check."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_support import (
    fingerprint,
    held_by_other_process,
    run,
    run_json,
    sha256,
    store_exists,
)

from hermes_store.db import migrate
from hermes_store.errors import StoreBusyError
from hermes_store.ops.backup import backup_store


def test_dry_run_lists_pending_revisions_and_changes_nothing(legacy_db) -> None:
    path = legacy_db(6)
    before = sha256(path)
    code, doc = run_json("--db", str(path), "upgrade", "--dry-run")
    assert code == 0
    assert doc["dry_run"] is True and doc["before"] == "legacy"
    assert doc["pending"][0] == "0007_v7_reasoning_content"
    assert doc["pending"][-1] == migrate.head_revision()
    assert sha256(path) == before
    assert list(path.parent.glob("*.pre-upgrade-*")) == []


def test_dry_run_on_a_store_not_made_yet_lists_every_revision(empty_store: str) -> None:
    code, doc = run_json("--db", empty_store, "upgrade", "--dry-run")
    assert code == 0
    assert doc["pending"][0] == "0001_v1_initial" and doc["pending"][-1] == migrate.head_revision()
    assert not store_exists(empty_store)


def test_an_unknown_target_revision_on_a_store_at_head_changes_nothing(head_store: str) -> None:
    before = fingerprint(head_store)
    result = run("--db", head_store, "upgrade", "no_such_revision")
    assert result.exit_code == 3 and "no_such_revision" in result.stderr
    assert fingerprint(head_store) == before


def test_upgrade_backs_up_the_legacy_store_first(legacy_db) -> None:
    path = legacy_db(10)
    code, doc = run_json("--db", str(path), "upgrade")
    assert code == 0, doc
    copy = Path(doc["backup"])
    assert copy.exists() and copy.name.startswith("state-v10.db.pre-upgrade-")
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    con = sqlite3.connect(copy)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "alembic_version" not in tables
    assert con.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 10
    assert con.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 358
    con.close()
    assert migrate.status(path).at_head


def test_no_backup_skips_it_and_an_up_to_date_store_is_not_copied(legacy_db) -> None:
    path = legacy_db(11)
    assert run("--db", str(path), "upgrade", "--no-backup").exit_code == 0
    assert run("--db", str(path), "upgrade").exit_code == 0
    assert list(path.parent.glob("*.pre-upgrade-*")) == []


def test_upgrade_refuses_while_another_process_holds_the_store(legacy_db) -> None:
    path = legacy_db(10)
    before = sha256(path)
    with held_by_other_process(path) as pid:
        code, doc = run_json("--db", str(path), "upgrade")
        assert code == 5
        assert pid in [h[0] for h in doc["error"]["holders"]]
    assert sha256(path) == before


def test_a_backup_past_its_deadline_gives_up_and_leaves_no_file(head_db: Path) -> None:
    with pytest.raises(StoreBusyError):
        backup_store(head_db, deadline_s=-1)
    assert [p for p in head_db.parent.iterdir() if ".backup-" in p.name] == []


def test_a_backup_is_a_consistent_copy(head_db: Path) -> None:
    result = backup_store(head_db, label="manual")
    assert result.path.exists() and result.bytes > 0
    assert migrate.status(result.path).at_head


def test_current_reports_journal_mode_and_search_capabilities(head_db: Path) -> None:
    before = sha256(head_db)
    code, doc = run_json("--db", str(head_db), "current")
    assert code == 0
    assert doc["journal_mode"] == "wal"
    assert doc["fts5"] is True and doc["trigram"] is True
    assert doc["sqlite_version"]
    assert sha256(head_db) == before


def test_an_unknown_target_revision_exits_3_and_changes_nothing(legacy_db) -> None:
    path = legacy_db(10)
    before = sha256(path)
    result = run("--db", str(path), "upgrade", "no_such_revision")
    assert result.exit_code == 3
    assert "no_such_revision" in result.stderr
    assert sha256(path) == before


# --------------------------------------------------------------------------- what to run next


UPKEEP = {"hermes-store compact", "hermes-store optimize-storage"}


@pytest.mark.parametrize("version", [11, 21])
def test_upgrade_names_the_one_upkeep_stats_names_and_leaves_no_wal(legacy_db,
                                                                    version: int) -> None:
    path = legacy_db(version)
    code, doc = run_json("--db", str(path), "upgrade", "--no-backup")
    assert code == 0, doc
    assert len(doc["next"]) == 1 and doc["next"][0] in UPKEEP
    human = run("--db", str(path), "stats").stdout
    _, st = run_json("--db", str(path), "stats")
    assert [a["command"] for a in st["advice"] if a["command"] in UPKEEP] == doc["next"]
    assert f"`{doc['next'][0]}`" in human
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_while_an_old_index_remains_only_optimize_storage_is_advised(head_db: Path) -> None:
    con = sqlite3.connect(head_db)
    with con:
        con.execute("CREATE VIRTUAL TABLE hs_fts_old USING fts5(content)")
        con.executemany("INSERT INTO hs_fts_old (content) VALUES (?)",
                        [("padding " * 400,) for _ in range(300)])
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1.7e9)")
        con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('s', 'user', ?, 1.7e9)", [("x" * 3000,) for _ in range(300)])
        con.execute("DELETE FROM messages")  # a large freelist as well
    con.close()
    _, st = run_json("--db", str(head_db), "stats")
    assert st["freelist_ratio"] >= 0.2
    assert [a["command"] for a in st["advice"] if a["command"] in UPKEEP] == [
        "hermes-store optimize-storage"]


def _killed_upgrade_backup(path: Path, stamp: str) -> Path:
    """What an upgrade killed during its backup leaves: a partial copy nobody holds."""
    partial = path.parent / f"{path.name}.pre-upgrade-{stamp}.partial"
    partial.write_bytes(b"SQLite format 3\x00" + b"\x00" * 4096)
    return partial


@pytest.mark.parametrize("flags", [(), ("--no-backup",)])
def test_unfinished_backups_of_killed_upgrades_are_removed_by_the_next_upgrade(
        legacy_db, flags: tuple[str, ...]) -> None:
    path = legacy_db(10)
    stale = [_killed_upgrade_backup(path, f"20261201T00000{i}Z") for i in range(3)]
    other_store = path.parent / "other.db.pre-upgrade-20261201T000000Z.partial"
    other_store.write_bytes(b"not ours")
    result = run("--db", str(path), "upgrade", *flags)
    assert result.exit_code == 0, result.output
    assert not any(p.exists() for p in stale)
    assert other_store.exists()
    assert list(path.parent.glob(f"{path.name}.*.partial")) == []
    assert migrate.status(path).at_head


def test_a_backup_in_progress_is_not_taken_for_a_stale_one(legacy_db) -> None:
    import fcntl
    import os

    path = legacy_db(11)
    live = _killed_upgrade_backup(path, "20261201T000000Z")
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the backup writing it holds it
        backup_store(path, label="pre-upgrade")
        assert live.exists()
    finally:
        os.close(fd)
    backup_store(path, label="pre-upgrade")
    assert not live.exists()
