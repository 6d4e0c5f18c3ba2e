"""hermes-store optimize-storage: phases, resumable, --no-vacuum, disk preflight, held stores,
the question above 500 MB."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_support import held_by_other_process, run, run_json, sha256

from hermes_store.cli import health
from hermes_store.db import migrate
from hermes_store.db.engine import dispose_all, open_engine, reading
from hermes_store.ops import backup
from hermes_store.ops import storage as maintenance

ROWS = 6_000  # above revision 0013's small-store threshold, so a backfill window opens


@pytest.fixture(scope="module")
def inline_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v11 store (inline indexes) written the way the agent wrote it."""
    path = tmp_path_factory.mktemp("inline") / "template.db"
    migrate.upgrade(path, "0011_v11_inline_fts")
    dispose_all()  # no pooled connection may keep the WAL alive past the checkpoint below
    con = sqlite3.connect(path)
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s-cli', 'cli', 1.0)")
    con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('s-cli', 'user', ?, ?)",
                    [(f"kernel socket 部署{n % 7} packet {n}", float(n)) for n in range(ROWS)])
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the copies below take the main file only
    con.close()
    return path


@pytest.fixture
def pending(inline_template: Path, tmp_path: Path) -> Path:
    """At head with the backfill window open and the retired inline tables still there."""
    path = Path(shutil.copy(inline_template, tmp_path / "state.db"))
    migrate.upgrade(path)
    with reading(open_engine(path)) as conn:
        assert maintenance.backfill_window(conn) is not None
    return path


def test_runs_every_phase_and_reports_the_space_returned(pending: Path) -> None:
    code, doc = run_json("--db", str(pending), "optimize-storage")
    assert code == 0
    assert doc["phases"] == ["backfill", "teardown", "vacuum", "done"]
    assert doc["rows_backfilled"] > 0 and doc["vacuumed"] is True
    assert doc["reclaimed_bytes"] == doc["bytes_before"] - doc["bytes_after"] > 0
    with reading(open_engine(pending)) as conn:
        assert maintenance.backfill_window(conn) is None
    code, hits = run_json("--db", str(pending), "search", "部署3", "--limit", "5")
    assert code == 0 and hits["count"] == 5


def test_human_output_names_phases_and_reclaimed_megabytes(pending: Path) -> None:
    result = run("--db", str(pending), "optimize-storage")
    assert result.exit_code == 0
    assert "reclaimed" in result.stdout
    assert "backfill" in result.stderr and "reclaiming old index" in result.stderr


def test_a_second_run_is_harmless(pending: Path) -> None:
    run("--db", str(pending), "optimize-storage")
    code, doc = run_json("--db", str(pending), "optimize-storage")
    assert code == 0 and doc["rows_backfilled"] == 0 and doc["tables_dropped"] == []


def test_no_vacuum_skips_the_vacuum_phase(pending: Path) -> None:
    code, doc = run_json("--db", str(pending), "optimize-storage", "--no-vacuum")
    assert code == 0 and "vacuum" not in doc["phases"] and doc["vacuumed"] is False


def test_refuses_while_another_process_holds_the_store(pending: Path) -> None:
    before = sha256(pending)
    with held_by_other_process(pending) as pid:
        result = run("--db", str(pending), "optimize-storage")
        assert result.exit_code == 5 and str(pid) in result.stderr
        assert sha256(pending) == before
        assert run("--db", str(pending), "optimize-storage", "--force").exit_code == 0


def test_disk_preflight_refuses_before_touching_anything(pending: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    before = sha256(pending)
    size = pending.stat().st_size
    usage = shutil.disk_usage(pending.parent)
    # Enough for --no-vacuum (about 30%), not for a full run.
    monkeypatch.setattr(backup.shutil, "disk_usage",
                        lambda _p: usage._replace(free=int(size * 0.5)))
    result = run("--db", str(pending), "optimize-storage")
    assert result.exit_code == 1 and "free" in result.stderr
    assert sha256(pending) == before
    assert run("--db", str(pending), "optimize-storage", "--no-vacuum").exit_code == 0


def test_a_large_store_asks_first(pending: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "ASK_ABOVE_BYTES", 1)
    before = sha256(pending)
    result = run("--db", str(pending), "optimize-storage")
    assert result.exit_code == 2 and "--yes" in result.stderr
    assert sha256(pending) == before
    assert run("--db", str(pending), "optimize-storage", "--yes").exit_code == 0


def test_a_store_behind_the_code_exits_6(inline_template: Path, tmp_path: Path) -> None:
    path = Path(shutil.copy(inline_template, tmp_path / "old.db"))
    assert run("--db", str(path), "optimize-storage").exit_code == 6
    assert run("--db", str(tmp_path / "none.db"), "optimize-storage").exit_code == 3


def test_an_interrupted_run_exits_130_and_the_next_run_finishes(
        pending: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = maintenance.backfill_chunk
    calls = {"n": 0}

    def interrupted(conn, chunk=maintenance.BACKFILL_CHUNK):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(conn, chunk)

    monkeypatch.setattr(maintenance, "backfill_chunk", interrupted)
    with reading(open_engine(pending)) as conn:
        start = maintenance.backfill_window(conn)
    assert start is not None
    result = run("--db", str(pending), "optimize-storage")
    assert result.exit_code == 130
    with reading(open_engine(pending)) as conn:
        lo, hi = maintenance.backfill_window(conn) or (None, None)
    assert lo is not None and start[0] < lo < hi  # two chunks committed, the rest pending
    monkeypatch.setattr(maintenance, "backfill_chunk", real)
    code, doc = run_json("--db", str(pending), "optimize-storage")
    assert code == 0 and 0 < doc["rows_backfilled"] < ROWS
    with reading(open_engine(pending)) as conn:
        assert maintenance.backfill_window(conn) is None


def test_the_size_announced_before_is_the_size_reported_as_before(pending: Path,
                                                                     monkeypatch) -> None:
    """The only figure printed before the run (the store's size, above the question's
    threshold) is measured as the result's "before" is, file plus WAL, so "the store is X"
    and "reclaimed Y (X -> Z)" speak of the same quantity."""
    from hermes_store.cli.render import size

    monkeypatch.setattr(health, "ASK_ABOVE_BYTES", 0)
    before = maintenance.file_bytes(pending)
    result = run("--db", str(pending), "optimize-storage", "--yes")
    assert result.exit_code == 0, result.output
    assert f"the store is {size(before)};" in result.stderr
    assert f"({size(before)} -> " in result.stdout
