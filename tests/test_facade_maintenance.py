"""SessionDB maintenance: prune, delete, archive and pin, vacuum, meta."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from backends import sql

from hermes_store import SessionDB
from hermes_store.repo import retention

DAY = 86400.0


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        yield instance


def aged(db: SessionDB, sid: str, days: float, *, parent: str | None = None,
         reason: str | None = "user_exit", source: str = "cli",
         started_days: float | None = None) -> None:
    """A session whose start and end lie ``days`` ago (``reason=None`` leaves it open)."""
    now = time.time()
    db.create_session(sid, source, parent_session_id=parent)
    started = now - (started_days if started_days is not None else days) * DAY
    sql(db, "UPDATE sessions SET started_at = :t WHERE id = :id", t=started, id=sid)
    if reason is not None:
        sql(db, "UPDATE sessions SET ended_at = :e, end_reason = :r WHERE id = :id",
            e=now - days * DAY, r=reason, id=sid)


def parent_of(db: SessionDB, sid: str) -> str | None:
    return db.get_session(sid)["parent_session_id"]


# --------------------------------------------------------------------------- prune


def test_prune_example_of_the_contract(db: SessionDB) -> None:
    aged(db, "A", 200)
    aged(db, "B", 200, parent="A")
    aged(db, "C", 10, parent="B")
    aged(db, "D", 10, parent="C")
    for sid in "ABCD":
        db.append_message(sid, "user", f"in {sid}",
                          timestamp=db.get_session(sid)["started_at"])
    assert db.prune_sessions(90) == 2
    assert db.get_session("A") is None and db.get_session("B") is None
    assert parent_of(db, "C") is None and parent_of(db, "D") == "C"
    assert db.message_count() == 2


def test_prune_only_touches_ended_sessions(db: SessionDB) -> None:
    aged(db, "open_old", 200, reason=None)
    aged(db, "ended_old", 200)
    assert db.prune_sessions(90) == 1
    assert db.get_session("open_old") is not None


def test_prune_age_is_last_activity_not_start(db: SessionDB) -> None:
    aged(db, "long", 1, started_days=200)
    db.append_message("long", "user", "still talking", timestamp=time.time() - DAY)
    aged(db, "stale", 200)
    assert db.prune_sessions(90) == 1
    assert db.get_session("long") is not None


def test_prune_treats_a_compression_lineage_as_a_unit(db: SessionDB) -> None:
    aged(db, "seg1", 200, reason="compression", started_days=201)
    aged(db, "seg2", 150, parent="seg1", reason="compression", started_days=200)
    aged(db, "tip", 5, parent="seg2", started_days=150)
    db.append_message("tip", "user", "recent", timestamp=time.time() - 5 * DAY)
    assert db.prune_sessions(90) == 0
    assert {db.get_session(s) is not None for s in ("seg1", "seg2", "tip")} == {True}
    sql(db, "UPDATE messages SET timestamp = :t", t=time.time() - 100 * DAY)
    assert db.prune_sessions(90) == 3


def test_prune_spares_pinned_lineages(db: SessionDB) -> None:
    aged(db, "keep", 200)
    aged(db, "drop", 200)
    db.pin_session("keep")
    assert db.prune_sessions(90) == 1
    assert db.get_session("keep") is not None


def test_prune_with_a_source_matches_exactly(db: SessionDB) -> None:
    aged(db, "tg", 200, source="telegram")
    aged(db, "tg2", 200, source="Telegram")
    aged(db, "cli", 200)
    assert db.prune_sessions(30, source="telegram") == 1
    assert db.get_session("tg") is None and db.session_count() == 2


def test_zero_days_prunes_every_ended_session_inactive_before_now(db: SessionDB) -> None:
    db.create_session("just_now", "cli")
    db.end_session("just_now", "user_exit")
    aged(db, "open", 0, reason=None)
    time.sleep(0.01)
    assert db.prune_sessions(0) == 1
    assert db.get_session("open") is not None


def test_negative_days_is_a_value_error_and_deletes_nothing(db: SessionDB) -> None:
    aged(db, "x", 200)
    with pytest.raises(ValueError):
        db.prune_sessions(-1)
    with pytest.raises(TypeError):
        db.prune_sessions("90")  # type: ignore[arg-type]
    assert db.session_count() == 1


def test_prune_is_one_transaction(db: SessionDB, monkeypatch) -> None:
    aged(db, "a", 200)
    aged(db, "kid", 1, parent="a")
    db.append_message("a", "user", "x", timestamp=time.time() - 200 * DAY)
    real = retention.delete_sessions

    def fails_after_deleting(conn, ids):
        real(conn, ids)
        raise RuntimeError("crash after the deletes")

    monkeypatch.setattr(retention, "delete_sessions", fails_after_deleting)
    with pytest.raises(RuntimeError):
        db.prune_sessions(90)
    assert db.get_session("a") is not None and db.message_count("a") == 1
    assert parent_of(db, "kid") == "a"


def _session_files(tmp: Path, sid: str) -> list[Path]:
    files = [tmp / f"{sid}.json", tmp / f"{sid}.jsonl", tmp / f"request_dump_{sid}_1.json",
             tmp / f"request_dump_{sid}_2.json"]
    for f in files:
        f.write_text("{}")
    return files


def test_prune_removes_session_files_after_commit(db: SessionDB, tmp_path: Path) -> None:
    files_dir = tmp_path / "sessions"
    files_dir.mkdir()
    aged(db, "gone", 200)
    aged(db, "kept", 1)
    doomed = _session_files(files_dir, "gone")
    kept = _session_files(files_dir, "kept")
    (files_dir / "gone.json").unlink()  # a missing file is ignored
    assert db.prune_sessions(90, sessions_dir=files_dir) == 1
    assert not any(f.exists() for f in doomed)
    assert all(f.exists() for f in kept)
    db.prune_sessions(90, sessions_dir=tmp_path / "missing_dir")


# --------------------------------------------------------------------------- delete


def test_delete_session_orphans_children_and_removes_messages(db: SessionDB, tmp_path) -> None:
    db.create_session("p", "cli")
    db.create_session("kid", "subagent", parent_session_id="p")
    db.append_message("p", "user", "parentword")
    files = _session_files(tmp_path, "p")
    assert db.delete_session("p", sessions_dir=tmp_path) is True
    assert db.get_session("p") is None and parent_of(db, "kid") is None
    assert db.message_count() == 0
    assert not any(f.exists() for f in files)
    if db.location.dialect == "sqlite":  # the FTS5 index (PostgreSQL's search is its own)
        hits = db._conn.execute("SELECT count(*) FROM hs_fts WHERE hs_fts MATCH "
                                "'parentword'").fetchone()[0]
        assert hits == 0


def test_delete_of_an_unknown_session_is_false(db: SessionDB) -> None:
    assert db.delete_session("ghost") is False


def test_delete_works_on_open_sessions(db: SessionDB) -> None:
    db.create_session("live", "cli")
    db.append_message("live", "user", "x")
    assert db.delete_session("live") is True and db.session_count() == 0


# --------------------------------------------------------------------------- archive / pin


def test_archive_and_unarchive_move_the_whole_lineage(db: SessionDB) -> None:
    aged(db, "a", 20, reason="compression", started_days=21)
    aged(db, "b", 10, parent="a", started_days=20)
    assert db.archive_session("a") is True
    assert [db.get_session(s)["archived"] for s in ("a", "b")] == [1, 1]
    assert db.archive_session("b") is False  # already archived
    assert db.unarchive_session("b") is True
    assert [db.get_session(s)["archived"] for s in ("a", "b")] == [0, 0]


def test_pinned_sessions_are_never_archived_and_pin_unarchives(db: SessionDB) -> None:
    aged(db, "s", 20)
    db.archive_session("s")
    assert db.pin_session("s") is True
    row = db.get_session("s")
    assert (row["pinned"], row["archived"]) == (1, 0)
    assert db.archive_session("s") is False
    assert db.unpin_session("s") is True and db.get_session("s")["pinned"] == 0
    assert db.pin_session("ghost") is False


# --------------------------------------------------------------------------- vacuum / meta


@pytest.mark.sqlite_only
def test_vacuum_rewrites_the_file_and_leaves_an_empty_wal(db: SessionDB) -> None:
    db.create_session("s", "cli")
    for i in range(200):
        db.append_message("s", "user", "payload " * 200 + str(i))
    db.clear_messages("s")
    before = os.path.getsize(db.db_path)
    db.vacuum()
    assert os.path.getsize(db.db_path) < before
    wal = Path(str(db.db_path) + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert db.get_session("s") is not None


def test_meta_is_a_text_upsert(db: SessionDB) -> None:
    assert db.get_meta("missing") is None
    db.set_meta("n", 5)
    assert db.get_meta("n") == "5"
    db.set_meta("n", "six")
    assert db.get_meta("n") == "six"
    db.set_meta("n", None)
    assert db.get_meta("n") is None
