"""Writers of the library queue for the write lock on an OS lock beside the store.

The lock (``<store>-writer.lock``) is taken before ``BEGIN IMMEDIATE`` and released after the
commit; readers never take it; a writer's wait for it is bounded by its time budget; a process
killed while holding it releases it; a filesystem without such locks falls back to SQLite's busy
timeout. The other processes in these tests are ``spawn``-ed; the test process itself plays a
holder by locking the file through its own descriptor (``flock`` locks belong to the open file
description, so that conflicts with the library's own descriptors as another process would).
"""

from __future__ import annotations

import errno
import logging
import multiprocessing as mp
import signal
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import reliability_workers as rw

from hermes_store import SessionDB
from hermes_store.db import engine as eng
from hermes_store.db import writer_queue
from hermes_store.errors import StoreBusyError
from hermes_store.ops import backup, holders, recover

SPAWN = mp.get_context("spawn")
# How long a blocked writer is given to show it would not wait (it must still be waiting).
SETTLE_S = 0.5
LIVENESS_S = 30


def _lock_file(store: Path) -> Path:
    return Path(writer_queue.lock_path(store))


@pytest.fixture
def held(head_db: Path) -> Iterator[int]:
    """The writers' lock, held by the test through a descriptor of its own."""
    fd = writer_queue.join(head_db, 0.0)
    assert fd is not None
    try:
        yield fd
    finally:
        writer_queue.leave(fd)


def _lock_is_taken(store: Path) -> bool:
    try:
        fd = writer_queue.join(store, 0.0)
    except writer_queue.QueueTimeout:
        return True
    assert fd is not None
    writer_queue.leave(fd)
    return False


def _in_thread(fn) -> tuple[threading.Thread, list[BaseException], list[object]]:
    errors: list[BaseException] = []
    results: list[object] = []

    def run() -> None:
        try:
            results.append(fn())
        except BaseException as err:  # noqa: BLE001 - handed to the test
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors, results


def _add_session(path: Path, session_id: str) -> None:
    con = sqlite3.connect(path)
    con.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', 0)", (session_id,))
    con.commit()
    con.close()


def _contents(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute("SELECT content FROM messages ORDER BY id")]
    finally:
        con.close()


# --------------------------------------------------------------------------- the file


def test_a_write_creates_a_private_lock_file_beside_the_store(store_path: Path) -> None:
    with SessionDB(store_path) as db:
        db.create_session("s1", "cli")
    lock = _lock_file(store_path)
    assert lock.name == "state.db-writer.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert lock.stat().st_size == 0  # locked, never written


def test_the_lock_is_released_when_the_write_commits_or_fails(head_db: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        assert not _lock_is_taken(head_db)
        with pytest.raises(sqlite3.IntegrityError):
            db.append_message("no-such-session", "user", "refused by the foreign key")
        assert not _lock_is_taken(head_db)
        db.append_message("s1", "user", "goes straight through")
    assert _contents(head_db) == ["goes straight through"]


# --------------------------------------------------------------------------- queueing


def test_a_writer_waits_for_the_holder_and_writes_as_soon_as_it_lets_go(head_db: Path) -> None:
    # SQLite's own lock is free all along: only the queue can hold this writer back.
    _add_session(head_db, "s1")
    db = SessionDB(head_db)
    fd = writer_queue.join(head_db, 0.0)
    assert fd is not None
    try:
        thread, errors, _ = _in_thread(lambda: db.append_message("s1", "user", "queued"))
        thread.join(SETTLE_S)
        assert thread.is_alive(), "the writer went ahead of the lock's holder"
        assert _contents(head_db) == []
    finally:
        writer_queue.leave(fd)
    thread.join(LIVENESS_S)
    db.close()
    assert not thread.is_alive() and errors == []
    assert _contents(head_db) == ["queued"]


def test_readers_never_take_the_writers_lock(head_db: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "kubernetes rollout notes")
    eng.dispose_all()
    fd = writer_queue.join(head_db, 0.0)
    assert fd is not None
    try:
        def read_everything() -> tuple:
            with SessionDB(head_db) as db, SessionDB(head_db, readonly=True) as ro:
                return (db.get_messages("s1"), db.search_messages("kubernetes"),
                        ro.list_sessions_rich(), ro.message_count())

        thread, errors, results = _in_thread(read_everything)
        thread.join(LIVENESS_S)
        assert not thread.is_alive(), "a reader waited for the writers' lock"
        assert errors == []
        messages, hits, listed, count = results[0]
        assert [m["content"] for m in messages] == ["kubernetes rollout notes"]
        assert [h["session_id"] for h in hits] == ["s1"]
        assert [s["id"] for s in listed] == ["s1"] and count == 1
    finally:
        writer_queue.leave(fd)


def test_the_wait_is_bounded_by_the_budget_and_writes_nothing(head_db: Path, held: int,
                                                              monkeypatch) -> None:
    _add_session(head_db, "s1")
    monkeypatch.setattr(eng, "APPEND_BUDGET_S", 0.3)
    with SessionDB(head_db) as db:
        # The error v11 callers catch: a sqlite3.OperationalError saying the store is locked.
        with pytest.raises(sqlite3.OperationalError,
                           match=r"database is locked: append_message gave up") as caught:
            db.append_message("s1", "user", "not written")
        assert isinstance(caught.value, StoreBusyError)
        assert db.get_messages("s1") == []
        assert db.get_session("s1")["message_count"] == 0


def test_a_writer_given_up_on_leaves_the_queue_free_for_the_next(head_db: Path,
                                                                 monkeypatch) -> None:
    # The abandoned wait's helper thread gets the lock once the holder lets go, and must hand
    # it straight back instead of keeping it for a writer that is gone.
    _add_session(head_db, "s1")
    monkeypatch.setattr(eng, "APPEND_BUDGET_S", 0.3)
    fd = writer_queue.join(head_db, 0.0)
    assert fd is not None
    with SessionDB(head_db) as db:
        with pytest.raises(StoreBusyError):
            db.append_message("s1", "user", "given up")
        writer_queue.leave(fd)
        monkeypatch.setattr(eng, "APPEND_BUDGET_S", float(LIVENESS_S))
        db.append_message("s1", "user", "the next writer")
    assert _contents(head_db) == ["the next writer"]
    assert not _lock_is_taken(head_db)


def test_a_writer_killed_while_holding_the_lock_does_not_wedge_the_others(
        head_db: Path, tmp_path: Path, monkeypatch) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
    eng.dispose_all()
    ready = tmp_path / "ready"
    child = SPAWN.Process(target=rw.hold_open_transaction,
                          args=(str(head_db), "s1", "never committed", str(ready)))
    child.start()
    try:
        rw.wait_for_file(ready)
        assert _lock_is_taken(head_db)
    finally:
        child.kill()  # SIGKILL: nothing of the child's runs again
        child.join(timeout=10)
    assert child.exitcode == -signal.SIGKILL
    assert not _lock_is_taken(head_db)  # the kernel let go with the dead process
    monkeypatch.setattr(eng, "APPEND_BUDGET_S", 5.0)
    with SessionDB(head_db) as db:
        db.append_message("s1", "user", "after the kill")
        assert [m["content"] for m in db.get_messages("s1")] == ["after the kill"]


def test_writer_processes_queue_without_a_lock_error(head_db: Path, tmp_path: Path) -> None:
    reports = [tmp_path / f"w{n}.json" for n in range(4)]
    procs = [SPAWN.Process(target=rw.gateway_writer, args=(str(head_db), f"w{n}", 25, str(r)))
             for n, r in enumerate(reports)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 4
    assert [rw.read_report(r)["errors"] for r in reports] == [[]] * 4
    con = sqlite3.connect(head_db)
    try:
        counts = dict(con.execute("SELECT session_id, count(*) FROM messages GROUP BY 1"))
    finally:
        con.close()
    assert counts == {f"gw-w{n}": 25 for n in range(4)}  # the worker's session names


# --------------------------------------------------------------------------- falling back


def test_a_filesystem_without_os_locks_falls_back_to_the_busy_timeout(head_db: Path,
                                                                      monkeypatch,
                                                                      caplog) -> None:
    calls: list[int] = []

    def refuse(fd: int, op: int) -> None:
        calls.append(op)
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(writer_queue.fcntl, "flock", refuse)
    with caplog.at_level(logging.WARNING, logger=eng.__name__), SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        for n in range(3):
            db.append_message("s1", "user", f"without the queue {n}")
    assert len(calls) == 1  # refused once, then not asked again for this file
    warnings = [r.getMessage() for r in caplog.records if "no OS file lock" in r.getMessage()]
    assert len(warnings) == 1 and "state.db-writer.lock" in warnings[0]
    assert _contents(head_db) == [f"without the queue {n}" for n in range(3)]


def test_an_unopenable_lock_file_does_not_stop_a_write(store_path: Path) -> None:
    store_path.parent.mkdir(parents=True, exist_ok=True)
    _lock_file(store_path).mkdir()  # stands in for a lock file we may not open
    with SessionDB(store_path) as db:  # creating and upgrading the store write too
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "written anyway")
    assert _contents(store_path) == ["written anyway"]


def test_another_lock_error_from_the_os_is_not_swallowed(head_db: Path, monkeypatch) -> None:
    def broken(fd: int, op: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(writer_queue.fcntl, "flock", broken)
    with SessionDB(head_db) as db, pytest.raises(OSError, match="Input/output error"):
        db.create_session("s1", "cli")


# --------------------------------------------------------------------------- the sidecar


def test_holders_list_the_lock_file_and_copies_leave_it_out(head_db: Path,
                                                            tmp_path: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "kept in the copy")
    eng.dispose_all()
    assert _lock_file(head_db) in holders.store_files(head_db)
    copy = tmp_path / "copies" / "state.db"
    copied = backup.copy_with_sidecars(head_db, copy)
    assert _lock_file(copy) not in copied and not _lock_file(copy).exists()
    assert _contents(copy) == ["kept in the copy"]


def test_recover_leaves_no_lock_file_of_its_scratch_store(head_db: Path, tmp_path: Path) -> None:
    with SessionDB(head_db) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "salvaged")
    eng.dispose_all()
    out = tmp_path / "out" / "recovered.db"
    report = recover.recover_store(head_db, out)
    assert report.status == "complete"
    assert sorted(p.name for p in out.parent.iterdir()) == ["recovered.db"]
    assert _contents(out) == ["salvaged"]
