"""Processes killed mid-write, mid-upgrade and mid-maintenance, and a full disk: a rerun
completes, nothing is lost, doubled or half-written, and every integrity check passes."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import reliability_workers as rw
from sqlalchemy import Engine, event

from hermes_store import SessionDB
from hermes_store.db import engine as eng
from hermes_store.db import migrate, names
from hermes_store.errors import StoreFullError, StoreReplacedError

SPAWN = mp.get_context("spawn")


# --------------------------------------------------------------------------- helpers


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=5)


def _integrity(path: Path) -> str:
    con = _connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _fts_integrity_ok(path: Path) -> None:
    con = _connect(path)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%fts5%'")]
        for table in tables:
            con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        con.close()


def _counters_match_rows(path: Path) -> dict[str, int]:
    con = _connect(path)
    try:
        counters = dict(con.execute("SELECT id, message_count FROM sessions"))
        rows = dict(con.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"))
    finally:
        con.close()
    assert counters == {sid: rows.get(sid, 0) for sid in counters}
    return counters


def _contents(path: Path) -> Counter[str]:
    con = _connect(path)
    try:
        return Counter(r[0] for r in con.execute("SELECT content FROM messages"))
    finally:
        con.close()


def _kill(proc: mp.process.BaseProcess) -> None:
    proc.kill()  # SIGKILL: no rollback, no checkpoint, no atexit
    proc.join(timeout=10)
    assert proc.exitcode == -signal.SIGKILL


@pytest.fixture
def store(head_db: Path) -> Iterator[Path]:
    engine = eng.open_engine(head_db)
    rw.create_session(engine, "s1", "cli")
    rw.append(engine, "s1", "before the crash")
    eng.dispose_all()  # the children own the file now
    yield head_db


# --------------------------------------------------------------------------- deleted sidecars


@pytest.mark.parametrize("sidecar", ["-wal", "-shm"])
def test_a_sidecar_deleted_under_a_running_writer_refuses_its_next_write(
        head_db: Path, sidecar: str) -> None:
    with SessionDB(head_db) as db:
        db.create_session("live", "cli")
        acknowledged = [db.append_message("live", "user", f"saved {i}") for i in range(3)]
        Path(f"{head_db}{sidecar}").unlink()  # rm under a live process
        for _ in range(2):  # every later write, not just the first
            with pytest.raises(StoreReplacedError, match=sidecar) as info:
                db.append_message("live", "assistant", "would be lost with the process")
        assert isinstance(info.value, sqlite3.OperationalError)  # what v11 callers catch
        with pytest.raises(StoreReplacedError):
            db.create_session("next", "cli")
    assert len(acknowledged) == 3


def test_a_process_that_opens_the_store_after_a_sidecar_was_deleted_writes_normally(
        head_db: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("live", "cli")
    eng.dispose_all()  # the last connection closed: SQLite itself removes the sidecars
    assert not Path(f"{head_db}-wal").exists()
    with SessionDB(head_db) as db:
        db.append_message("live", "user", "into a fresh WAL")
        for i in range(60):  # past the checkpoint cadence: the WAL is reset, never replaced
            db.append_message("live", "assistant", f"reply {i}")
        assert db.message_count("live") == 61


# --------------------------------------------------------------------------- killed writers


def test_writer_killed_inside_its_transaction_leaves_no_trace(store: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = SPAWN.Process(target=rw.hold_open_transaction,
                          args=(str(store), "s1", "never committed", str(ready)))
    child.start()
    rw.wait_for_file(ready)
    _kill(child)

    assert _integrity(store) == "ok"
    _fts_integrity_ok(store)
    assert _contents(store) == Counter({"before the crash": 1})
    assert _counters_match_rows(store) == {"s1": 1}
    # The dead writer's lock died with it: the next write goes straight through.
    engine = eng.open_engine(store)
    rw.append(engine, "s1", "after the crash")
    assert _counters_match_rows(store) == {"s1": 2}


def test_writer_killed_at_a_random_moment_loses_no_committed_message(store: Path,
                                                                     tmp_path: Path) -> None:
    log = tmp_path / "committed.log"
    child = SPAWN.Process(target=rw.append_until_killed, args=(str(store), "s1", str(log)))
    child.start()
    rw.wait_for_file(log)
    while len(log.read_text().splitlines()) < 40:
        assert child.is_alive(), "the writer died before it was killed"
        time.sleep(0.005)
    _kill(child)

    logged = Counter(log.read_text().splitlines())
    stored = _contents(store)
    stored.pop("before the crash")
    assert max(stored.values()) == 1  # nothing doubled
    assert not logged - stored  # nothing the writer saw committed is missing
    # At most one commit can land between COMMIT and the log line when the signal arrives.
    assert len(stored - logged) <= 1
    assert _integrity(store) == "ok"
    _fts_integrity_ok(store)
    _counters_match_rows(store)


# --------------------------------------------------------------------------- killed upgrade

STALLING_REVISION = '''
"""A revision that does some DDL and then stalls while a marker file exists (test only)."""
import os
import pathlib
import time

from alembic import op

revision = "9999_stalls_midway"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("CREATE TABLE half_done (x INTEGER)")
    op.execute("ALTER TABLE sessions ADD COLUMN half_column INTEGER")
    op.execute("INSERT INTO state_meta (key, value) VALUES ('half', 'yes')")
    if os.path.exists({stall!r}):
        pathlib.Path({ready!r}).touch()
        time.sleep(600)


def downgrade():
    raise NotImplementedError("test revision")
'''


@pytest.fixture
def stalling(tmp_path: Path) -> tuple[str, Path, Path]:
    """The migrations plus one revision that stalls (to be killed) while ``stall`` exists."""
    location = tmp_path / "migrations"
    shutil.copytree(migrate.script_location(), location,
                    ignore=shutil.ignore_patterns("__pycache__"))
    stall, ready = tmp_path / "stall", tmp_path / "ready"
    (location / "versions" / "9999_stalls_midway.py").write_text(textwrap.dedent(
        STALLING_REVISION.format(head=migrate.head_revision(), stall=str(stall),
                                 ready=str(ready))))
    stall.touch()
    return str(location), stall, ready


def _kill_upgrade(path: Path, location: str, ready: Path) -> None:
    child = SPAWN.Process(target=rw.upgrade_with_location, args=(str(path), location))
    child.start()
    rw.wait_for_file(ready, timeout=60)
    _kill(child)


def _columns(path: Path, table: str) -> list[str]:
    con = _connect(path)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    con = _connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def _all_rows(path: Path, table: str) -> list[tuple]:
    con = _connect(path)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def _pairs(path: Path, sql: str) -> list[tuple]:
    con = _connect(path)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


def test_upgrade_killed_midway_through_a_legacy_adoption_applies_nothing_and_reruns(
        legacy_db, stalling) -> None:
    location, stall, ready = stalling
    path = legacy_db(6)
    messages_before = _all_rows(path, "messages")
    contents_before = [c for _, c in _pairs(path, "SELECT id, content FROM messages")]
    sessions_before = _all_rows(path, "sessions")

    _kill_upgrade(path, location, ready)

    assert _integrity(path) == "ok"
    assert migrate.status(path).state == "legacy"
    assert migrate.status(path).legacy_version == 6
    assert "half_done" not in _tables(path) and "alembic_version" not in _tables(path)
    assert _all_rows(path, "messages") == messages_before

    after = migrate.upgrade(path)
    assert after.state == "up-to-date"
    assert migrate.check(path) == []
    assert [c for _, c in _pairs(path, "SELECT id, content FROM messages")] == contents_before
    assert len(_all_rows(path, "sessions")) == len(sessions_before)
    _fts_integrity_ok(path)


def test_upgrade_killed_inside_a_revision_resumes_that_revision_whole(head_db: Path,
                                                                      stalling) -> None:
    location, stall, ready = stalling
    eng.dispose_all()
    _kill_upgrade(head_db, location, ready)

    assert _integrity(head_db) == "ok"
    assert migrate.status(head_db).current == migrate.head_revision()
    assert "half_column" not in _columns(head_db, "sessions")

    stall.unlink()
    migrate.upgrade(head_db, location=location)
    assert _tables(head_db) >= {"half_done"}
    assert "half_column" in _columns(head_db, "sessions")
    # Our own derived flags (hs_…) sit beside the stalled revision's row.
    assert [r for r in _all_rows(head_db, "state_meta")
            if not str(r[0]).startswith("hs_")] == [("half", "yes")]


# --------------------------------------------------------------------------- full disk


def _cap_growth(engine: Engine) -> None:
    """Every new connection may not grow the file: what a full disk looks like to SQLite."""
    engine.dispose()

    def cap(dbapi: sqlite3.Connection, _record: object) -> None:
        pages = dbapi.execute("PRAGMA page_count").fetchone()[0]
        dbapi.execute(f"PRAGMA max_page_count={int(pages)}")

    event.listen(engine, "connect", cap)


def test_a_full_disk_gives_a_clear_error_and_leaves_nothing_half_written(store: Path) -> None:
    with SessionDB(store) as db:
        _cap_growth(db.engine)
        with pytest.raises(StoreFullError, match="full") as info:
            db.append_message("s1", "tool", "a long tool result " * 20_000, tool_name="terminal")
        assert isinstance(info.value, sqlite3.OperationalError)  # what v11 callers catch
        with pytest.raises(StoreFullError):
            db.create_session("s2", "cli", system_prompt="a long system prompt " * 2_000)
        assert db.get_messages("s1")[-1]["content"] == "before the crash"  # reads still work
    eng.dispose_all()

    assert _integrity(store) == "ok"
    _fts_integrity_ok(store)
    assert _contents(store) == Counter({"before the crash": 1})
    assert _counters_match_rows(store) == {"s1": 1}  # and no session s2
    # Space is back: the store opens and takes the same write.
    rw.append(eng.open_engine(store), "s1", "a long tool result " * 20_000)
    assert _counters_match_rows(store) == {"s1": 2}


def test_a_full_disk_during_upgrade_leaves_the_legacy_store_as_it_was(legacy_db) -> None:
    path = legacy_db(4)
    before = _all_rows(path, "messages")
    engine = eng.open_engine(path)
    _cap_growth(engine)
    with pytest.raises(StoreFullError):
        migrate.upgrade(engine)
    eng.dispose_all()
    assert _integrity(path) == "ok"
    assert migrate.status(path).legacy_version == 4
    assert _all_rows(path, "messages") == before
    assert migrate.upgrade(path).state == "up-to-date"


# A real full disk: a small tmpfs mounted for the test (the machine's CI runs as root).
SMALL_DISK = "12m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        eng.dispose_all()
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int = 0) -> Path:
    """Take all the free space of ``disk`` but about ``leave`` bytes."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        left = shutil.disk_usage(disk).free - leave
        while left > 0:
            left -= os.write(fd, b"\1" * min(65536, left))
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)
    return filler


def _store_on(disk: Path, sessions: int = 2) -> Path:
    path = disk / "state.db"
    with SessionDB(path) as db:
        for s in range(sessions):
            db.create_session(f"s{s}", "cli")
            for i in range(60):
                db.append_message(f"s{s}", "user", f"hello world {i} {s} " * 40)
    eng.dispose_all()  # checkpointed, and no -shm: the next process must make one
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hermes_store.cli", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_store_opened_on_a_full_disk_says_disk_full_and_works_once_space_is_freed(
        small_disk: Path) -> None:
    path = _store_on(small_disk)
    filler = _fill(small_disk)
    with pytest.raises(StoreFullError, match="disk full") as info, SessionDB(path) as db:
        db.get_messages("s0")
    assert isinstance(info.value, sqlite3.OperationalError)
    filler.unlink()
    eng.dispose_all()
    with SessionDB(path) as db:
        assert len(db.get_messages("s0")) == 60


def test_the_cli_on_a_full_disk_says_so_in_text_and_json_and_doctor_sees_no_damage(
        small_disk: Path) -> None:
    path = _store_on(small_disk)
    _fill(small_disk)
    listed = _cli("--db", str(path), "list")
    assert listed.returncode == 1 and "disk full" in listed.stderr
    assert "Traceback" not in listed.stderr
    as_json = _cli("--db", str(path), "--json", "list")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "disk_full"
    doctor = _cli("--db", str(path), "doctor")
    assert doctor.returncode == 1 and "disk full" in doctor.stderr
    assert "DAMAGE" not in doctor.stdout + doctor.stderr
    assert "recover" not in doctor.stdout + doctor.stderr


def test_compact_with_no_room_at_all_says_disk_full_without_a_traceback(
        small_disk: Path) -> None:
    path = _store_on(small_disk)
    _fill(small_disk)
    result = _cli("--db", str(path), "compact", "--force")
    assert result.returncode == 1 and "disk full" in result.stderr
    assert "Traceback" not in result.stderr


def test_compact_that_runs_out_of_room_midway_says_what_it_kept(small_disk: Path) -> None:
    path = _store_on(small_disk, sessions=6)
    # Room for the preflight (the store's size; VACUUM's temp copy goes to another disk) but
    # not for the FTS merge plus VACUUM's copy through the WAL.
    _fill(small_disk, leave=path.stat().st_size + 40_000)
    result = _cli("--db", str(path), "compact", "--force")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "compact stopped at VACUUM, which was rolled back" in result.stderr
    assert "kept: fts optimize" in result.stderr
    assert _integrity(path) == "ok"
    assert sum(_contents(path).values()) == 360


# ------------------------------------------------------------------------- killed optimize_storage


def _fts_backlog(path: Path) -> dict[str, str]:
    con = _connect(path)
    try:
        return dict(con.execute("SELECT key, value FROM state_meta WHERE key IN (?, ?)",
                                (names.BACKFILL_HIGH_WATER, names.BACKFILL_PROGRESS)))
    finally:
        con.close()


def _indexed_exactly_once(path: Path) -> None:
    """Every FTS5 index agrees with its content, term by term (a row indexed twice, or not at
    all, changes the index checksum), and a term's hits equal the rows that hold it."""
    from hermes_store.ops import storage

    engine = eng.open_engine(path)
    assert eng.run_write(engine, storage.integrity_problems) == {}
    con = _connect(path)
    try:
        for term in ("encapsulation", "sysconfig"):
            hits = con.execute("SELECT count(*) FROM hs_fts WHERE hs_fts MATCH ?",
                               (term,)).fetchone()[0]
            distinct = con.execute("SELECT count(DISTINCT rowid) FROM hs_fts "
                                   "WHERE hs_fts MATCH ?", (term,)).fetchone()[0]
            assert hits == distinct > 0, term
    finally:
        con.close()


def _grow_past_the_inline_reindex_limit(path: Path, rows: int = 5_200) -> None:
    """Small legacy stores are re-indexed inside the upgrade; a larger one is left with a
    backfill window for optimize_storage, which is what these tests kill."""
    con = _connect(path)
    try:
        sid = con.execute("SELECT id FROM sessions ORDER BY started_at LIMIT 1").fetchone()[0]
        con.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            ((sid, "user", f"filler {i} encapsulation sysconfig {i % 97}", 1.7e9 + i)
             for i in range(rows)))
        con.execute("UPDATE sessions SET message_count = "
                    "(SELECT count(*) FROM messages WHERE session_id = sessions.id)")
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize(("phase", "nth"), [("backfill", 3), ("teardown", 3), ("vacuum", 1)])
def test_optimize_storage_killed_in_any_phase_reruns_to_an_index_with_every_row_once(
        legacy_db, phase: str, nth: int) -> None:
    from hermes_store.ops import storage

    path = legacy_db(11)
    _grow_past_the_inline_reindex_limit(path)
    migrate.upgrade(path)
    contents_before = _pairs(path, "SELECT id, content FROM messages")
    assert _fts_backlog(path)  # the inline index was retired: a backfill window is open
    eng.dispose_all()

    child = SPAWN.Process(target=rw.optimize_and_die, args=(str(path), phase, nth, 500, 200))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL, f"the child was not killed in {phase}"

    assert _integrity(path) == "ok"
    if phase == "backfill":  # killed between chunks: some committed, the rest still to do
        backlog = _fts_backlog(path)
        assert 0 < int(backlog["hs_backfill_progress"]) < int(backlog["hs_backfill_high_water"])
    storage.optimize_storage(path)

    assert _integrity(path) == "ok"
    assert _fts_backlog(path) == {}
    assert not {"hs_fts_old", "hs_fts_trigram_old"} & _tables(path)
    assert _pairs(path, "SELECT id, content FROM messages") == contents_before
    _indexed_exactly_once(path)
    _counters_match_rows(path)


# --------------------------------------------------------------------------- killed import


def _jsonl_backup(path: Path, sessions: int, per_session: int) -> Counter[str]:
    import json

    contents: Counter[str] = Counter()
    with open(path, "w", encoding="utf-8") as f:
        for s in range(sessions):
            messages = []
            for m in range(per_session):
                text = f"imported session {s} message {m}"
                contents[text] += 1
                messages.append({"role": "user" if m % 2 == 0 else "assistant", "content": text,
                                 "timestamp": 1_780_000_000.0 + s * 100 + m})
            f.write(json.dumps({"id": f"imp-{s:03d}", "source": "cli",
                                "started_at": 1_780_000_000.0 + s * 100,
                                "message_count": per_session, "messages": messages}) + "\n")
    return contents


def test_import_killed_mid_file_reruns_without_duplicates(head_db: Path, tmp_path: Path) -> None:
    from hermes_store.transfer.load import import_paths

    backup = tmp_path / "backup.jsonl"
    expected = _jsonl_backup(backup, sessions=30, per_session=5)
    eng.dispose_all()

    # Killed inside the transaction of the 12th session, after its rows were inserted.
    child = SPAWN.Process(target=rw.import_and_die,
                          args=(str(head_db), [str(backup)], "_write_record", 12))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL

    assert _integrity(head_db) == "ok"
    assert sorted(_counters_match_rows(head_db)) == [f"imp-{s:03d}" for s in range(11)]

    result = import_paths(eng.open_engine(head_db), [backup])
    assert (result.sessions_skipped, result.sessions_imported) == (11, 19)
    assert _contents(head_db) == expected
    assert all(n == 5 for n in _counters_match_rows(head_db).values())
    _fts_integrity_ok(head_db)


def test_a_claude_log_import_killed_before_its_commit_is_imported_once_on_rerun(
        head_db: Path, tmp_path: Path) -> None:
    import json

    from hermes_store.transfer.load import import_paths

    log = tmp_path / "proj" / "f6019a3e-2b1c-4d5e-8f70-112233445566.jsonl"
    log.parent.mkdir()
    lines = []
    for i in range(40):
        for role, text in (("user", f"question {i} about the flaky test"),
                           ("assistant", f"answer {i}: retry with a fixed seed")):
            lines.append({"type": role, "uuid": f"u-{i}-{role}", "parentUuid": None,
                          "sessionId": "f6019a3e-2b1c-4d5e-8f70-112233445566",
                          "cwd": "/home/ana/app", "timestamp": f"2025-11-19T21:{i:02d}:00.000Z",
                          "message": {"role": role, "content": text}})
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    eng.dispose_all()

    child = SPAWN.Process(target=rw.import_and_die,
                          args=(str(head_db), [str(log)], "_write_foreign", 1))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert _integrity(head_db) == "ok"
    assert _counters_match_rows(head_db) == {}

    first = import_paths(eng.open_engine(head_db), [log]).files[0]
    again = import_paths(eng.open_engine(head_db), [log]).files[0]
    assert (first.status, again.status) == ("imported", "already_imported")
    stored = _contents(head_db)
    assert len(stored) == 80 and max(stored.values()) == 1
    assert list(_counters_match_rows(head_db).values()) == [80]
    _fts_integrity_ok(head_db)


def test_a_full_disk_during_optimize_storage_is_a_clear_error_and_a_rerun_finishes(
        legacy_db) -> None:
    from hermes_store.ops import storage

    path = legacy_db(11)
    _grow_past_the_inline_reindex_limit(path)
    migrate.upgrade(path)
    contents_before = _pairs(path, "SELECT id, content FROM messages")
    _cap_growth(eng.open_engine(path))
    with pytest.raises(StoreFullError):
        storage.optimize_storage(path, chunk=500)
    eng.dispose_all()

    assert _integrity(path) == "ok"
    assert _fts_backlog(path)  # the window is still open where the disk filled up
    storage.optimize_storage(path)
    assert _fts_backlog(path) == {}
    assert _pairs(path, "SELECT id, content FROM messages") == contents_before
    _indexed_exactly_once(path)


# --------------------------------------------------------------------------- killed repair


def test_repair_killed_inside_its_fix_leaves_the_store_as_it_was_and_a_rerun_heals_it(
        store: Path) -> None:
    from hermes_store.ops import repair as recovery

    engine = eng.open_engine(store)
    for i in range(30):
        rw.append(engine, "s1", f"encapsulation note {i}")
    eng.dispose_all()
    con = _connect(store)
    con.execute("UPDATE hs_fts_data SET block = randomblob(length(block)) WHERE id > 10")
    con.commit()
    con.close()
    contents_before = _contents(store)

    child = SPAWN.Process(target=rw.repair_and_die, args=(str(store),))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL

    assert _integrity(store) == "ok"
    assert _contents(store) == contents_before
    assert list(store.parent.glob("*repair*"))  # the backup was taken before any fix
    report = recovery.repair_store(store)
    assert report.healthy, report.to_dict()
    eng.dispose_all()
    _fts_integrity_ok(store)
    with SessionDB(store) as db:
        assert len(db.search_messages("encapsulation", limit=100)) == 30
    _counters_match_rows(store)


def test_recover_killed_midway_leaves_nothing_that_looks_like_a_result(legacy_db,
                                                                       tmp_path: Path) -> None:
    source = legacy_db(11)
    before = source.read_bytes()
    output = tmp_path / "recovered.db"
    child = SPAWN.Process(target=rw.recover_and_die, args=(str(source), str(output)))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert source.read_bytes() == before
    # A store at head holding 50 of 358 messages must never sit where the result goes.
    assert not output.exists()
    # A rerun clears the killed run's scratch and finishes.
    from hermes_store.ops.recover import recover_store

    report = recover_store(source, output)
    assert report.status == "complete"
    assert not list(tmp_path.glob(".recovered.db.partial*"))
    con = sqlite3.connect(output)
    try:
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == 358
    finally:
        con.close()
