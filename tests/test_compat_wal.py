"""apply_wal_with_fallback: WAL on any raw connection, DELETE only where the filesystem refuses
WAL's locks, never a downgrade of a file others use in WAL (docs/v21.md#module-names)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.compat import apply_wal_with_fallback
from hermes_store.db import connection_policy as policy


class Refusing(sqlite3.Connection):
    """A connection on a filesystem that refuses WAL: setting it fails with ``error``; the
    probe fails too for the first ``probe_failures`` reads (a flaky network mount)."""

    error = "locking protocol"
    probe_failures = 0

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
        text = sql.strip().lower().replace(" ", "")
        if text == "pragmajournal_mode=wal":
            raise sqlite3.OperationalError(self.error)
        if text == "pragmajournal_mode" and self.probe_failures:
            self.probe_failures -= 1
            raise sqlite3.OperationalError("probe failed")
        return super().execute(sql, *args)


def _refusing(path: Path, error: str, probe_failures: int = 0) -> sqlite3.Connection:
    con = sqlite3.connect(path, factory=Refusing)
    con.error = error  # type: ignore[attr-defined]
    con.probe_failures = probe_failures  # type: ignore[attr-defined]
    return con


def _mode(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        con.close()


@pytest.fixture(autouse=True)
def _fresh_warnings() -> Iterator[None]:
    policy._wal_warned.clear()
    yield
    policy._wal_warned.clear()


def test_a_new_file_goes_to_wal(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "a.db")
    assert apply_wal_with_fallback(con) == "wal"
    con.close()
    assert _mode(tmp_path / "a.db") == "wal"


def test_a_file_in_wal_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchall()
    con = sqlite3.connect(path)
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    assert apply_wal_with_fallback(con, db_label="a.db") == "wal"
    con.close()
    assert [s for s in seen if "journal_mode" in s.lower()] == ["PRAGMA journal_mode"]


@pytest.mark.parametrize("error", ["locking protocol", "not authorized"])
def test_a_filesystem_refusing_wal_falls_back_to_delete_and_warns_once(
        tmp_path: Path, caplog, error: str) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_store.db.engine")
    first = _refusing(tmp_path / "a.db", error)
    assert apply_wal_with_fallback(first, db_label="nfs/state.db") == "delete"
    assert first.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    second = _refusing(tmp_path / "a.db", error)
    assert apply_wal_with_fallback(second, db_label="nfs/state.db") == "delete"
    other = _refusing(tmp_path / "b.db", error)
    assert apply_wal_with_fallback(other, db_label="nfs/other.db") == "delete"
    for con in (first, second, other):
        con.close()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "nfs/state.db" in warnings[0] and "journal_mode=DELETE" in warnings[0]
    assert error in warnings[0]
    assert "nfs/other.db" in warnings[1]


@pytest.mark.parametrize("probe_failures", [1, 9])
def test_a_file_already_in_wal_is_never_downgraded(tmp_path: Path, probe_failures: int) -> None:
    # One failed probe: the on-disk mode is read again. Every probe failing: the header says.
    path = tmp_path / "a.db"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL").fetchall()
    setup.execute("CREATE TABLE t (x)")
    setup.close()
    con = _refusing(path, "locking protocol", probe_failures=probe_failures)
    with pytest.raises(sqlite3.OperationalError, match="locking protocol"):
        apply_wal_with_fallback(con)
    con.close()
    assert _mode(path) == "wal"


@pytest.mark.parametrize("error", ["disk I/O error", "database is locked"])
def test_other_errors_propagate_disk_io_included(tmp_path: Path, error: str) -> None:
    con = _refusing(tmp_path / "a.db", error)
    with pytest.raises(sqlite3.OperationalError, match=error):
        apply_wal_with_fallback(con)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    con.close()


def test_the_store_opens_through_the_same_policy(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "s.db") as db:
        db.create_session("s1", "cli")
    assert _mode(tmp_path / "s.db") == "wal"


@pytest.mark.parametrize("already_wal", [False, True])
def test_on_macos_both_wal_paths_ask_for_full_fsync(tmp_path: Path, monkeypatch,
                                                     already_wal: bool) -> None:
    monkeypatch.setattr(policy.sys, "platform", "darwin")
    path = tmp_path / "a.db"
    if already_wal:
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchall()
    con = sqlite3.connect(path)
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    assert apply_wal_with_fallback(con) == "wal"
    assert con.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    con.close()
    assert "PRAGMA checkpoint_fullfsync=1" in seen and "PRAGMA synchronous=FULL" in seen


def test_elsewhere_the_durability_pragmas_are_left_alone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(policy.sys, "platform", "linux")
    con = sqlite3.connect(tmp_path / "a.db")
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    apply_wal_with_fallback(con)
    con.close()
    assert not any("fullfsync" in s or "synchronous" in s for s in seen)
