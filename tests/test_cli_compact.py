"""hermes-store compact, and the whole-file safeguards it shares: holders, disk preflight."""

from __future__ import annotations

import os
import sqlite3
from collections import namedtuple
from pathlib import Path

import pytest
from cli_support import add_session, held_by_other_process, run, run_json

from hermes_store.errors import StoreHeldError
from hermes_store.ops import backup
from hermes_store.ops.holders import ensure_not_held, find_holders


def _freelist(path: Path) -> int:
    con = sqlite3.connect(path)
    n = con.execute("PRAGMA freelist_count").fetchone()[0]
    con.close()
    return n


@pytest.fixture
def bloated(head_db: Path) -> Path:
    add_session(head_db, "keep", 20, text="kept words")
    add_session(head_db, "gone", 400, text="y" * 3000)
    con = sqlite3.connect(head_db)
    with con:
        con.execute("DELETE FROM messages WHERE session_id = 'gone'")
    con.close()
    return head_db


def test_compact_vacuums_and_leaves_no_wal(bloated: Path) -> None:
    assert _freelist(bloated) > 0
    code, doc = run_json("--db", str(bloated), "compact")
    assert code == 0, doc
    assert doc["after"]["main"] < doc["before"]["main"] + doc["before"]["wal"]
    assert doc["after"]["wal"] == 0
    assert doc["steps"] == ["fts optimize", "pragma optimize", "checkpoint passive", "vacuum",
                            "checkpoint truncate"]
    assert _freelist(bloated) == 0
    con = sqlite3.connect(bloated)
    assert con.execute("SELECT COUNT(*) FROM hs_fts WHERE hs_fts MATCH 'kept'"
                       ).fetchone()[0] == 20
    con.close()


def test_compact_prints_sizes_before_and_after(bloated: Path) -> None:
    result = run("--db", str(bloated), "compact")
    assert result.exit_code == 0
    assert "main" in result.stdout and "->" in result.stdout and "WAL" in result.stdout


def test_compact_refuses_while_another_process_holds_the_store(bloated: Path) -> None:
    with held_by_other_process(bloated) as pid:
        code, doc = run_json("--db", str(bloated), "compact")
        assert code == 5
        assert doc["ok"] is False and doc["error"]["code"] == "held"
        assert pid in [h[0] for h in doc["error"]["holders"]]
        result = run("--db", str(bloated), "compact", "--force")
        assert result.exit_code == 0, result.output
        assert str(pid) in result.stderr  # a forced run still names whom it overrode


def test_compact_refuses_without_free_disk_and_changes_nothing(bloated: Path,
                                                                monkeypatch) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(backup.shutil, "disk_usage", lambda _p: usage(10**9, 10**9, 1024))
    free_before = _freelist(bloated)
    result = run("--db", str(bloated), "compact")
    assert result.exit_code == 1
    assert "free" in result.stderr
    assert _freelist(bloated) == free_before


def test_compact_needs_an_existing_store_at_head(tmp_path: Path, legacy_db) -> None:
    assert run("--db", str(tmp_path / "none.db"), "compact").exit_code == 3
    assert run("--db", str(legacy_db(10)), "compact").exit_code == 6


def test_holders_are_other_processes_never_ourselves(head_db: Path) -> None:
    con = sqlite3.connect(head_db)  # our own handle does not count
    con.execute("SELECT 1 FROM sessions").fetchall()
    assert find_holders(head_db) == []
    with held_by_other_process(head_db) as pid:
        holders = find_holders(head_db)
        assert [h[0] for h in holders] == [pid]
        assert "python" in holders[0][1]
        with pytest.raises(StoreHeldError) as err:
            ensure_not_held(head_db, what="testing")
        assert err.value.holders == holders
        assert ensure_not_held(head_db, force=True) == holders
    con.close()


def test_a_holder_of_only_the_wal_counts(head_db: Path) -> None:
    keeper = sqlite3.connect(head_db)
    add_session(head_db, "s", 3)
    wal = Path(f"{head_db}-wal")
    assert wal.exists()
    fd = os.open(wal, os.O_RDONLY)
    try:
        assert find_holders(head_db) == []  # our own fd is excluded …
        with held_by_other_process(wal, raw=True) as pid:  # … another process's is not
            assert pid in [h[0] for h in find_holders(head_db)]
    finally:
        os.close(fd)
        keeper.close()


def test_optimize_is_the_old_name_of_compact_and_stays_out_of_the_help(bloated: Path) -> None:
    code, doc = run_json("--db", str(bloated), "optimize")
    assert code == 0, doc
    assert doc["command"] == "optimize"  # scripts written against the old name read it back
    assert doc["after"]["wal"] == 0 and _freelist(bloated) == 0
    listed = run("--help").stdout
    assert "compact" in listed
    assert "optimize " not in listed.replace("optimize-storage", "")
