"""v21 API (docs/v21.md#compression): compression cooldown, fallback streak, locks, orphaned continuations, and
the compression tip and lineage."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from v21_stores import BASE_TS, column, holding_write_lock, make, set_columns

from hermes_store import SessionDB
from hermes_store.db.models import CompressionLock

DAY = 86400.0
locks = CompressionLock.__table__


def lock_row(store: SessionDB, session_id: str) -> dict | None:
    row = store._read(lambda c: c.execute(select(locks).where(locks.c.session_id == session_id))
                      .mappings().first())
    return dict(row) if row is not None else None


# --------------------------------------------------------------------------- cooldown


def test_a_cooldown_is_reported_while_it_lasts(db: SessionDB) -> None:
    make(db, "s1")
    until = time.time() + 600
    db.record_compression_failure_cooldown("s1", until, "context too long")
    got = db.get_compression_failure_cooldown("s1")
    assert got is not None
    assert got["cooldown_until"] == until
    assert got["error"] == "context too long"
    assert 0 < got["remaining_seconds"] <= 600


def test_an_expired_cooldown_reads_as_none_but_stays_stored(db: SessionDB) -> None:
    make(db, "s1")
    db.record_compression_failure_cooldown("s1", time.time() - 1, "old failure")
    assert db.get_compression_failure_cooldown("s1") is None
    assert column(db, "s1", "compression_failure_error") == "old failure"
    assert column(db, "s1", "compression_failure_cooldown_until") is not None


def test_clearing_a_cooldown_nulls_both_columns(db: SessionDB) -> None:
    make(db, "s1")
    db.record_compression_failure_cooldown("s1", time.time() + 600)
    db.clear_compression_failure_cooldown("s1")
    assert db.get_compression_failure_cooldown("s1") is None
    assert column(db, "s1", "compression_failure_cooldown_until") is None
    assert column(db, "s1", "compression_failure_error") is None


def test_cooldown_calls_with_a_falsy_or_unknown_id_do_nothing(db: SessionDB) -> None:
    for sid in (None, ""):
        db.record_compression_failure_cooldown(sid, time.time() + 60)
        db.clear_compression_failure_cooldown(sid)
        assert db.get_compression_failure_cooldown(sid) is None
    db.record_compression_failure_cooldown("ghost", time.time() + 60)
    assert db.get_compression_failure_cooldown("ghost") is None
    assert db.session_count() == 0
    with pytest.raises(TypeError):
        db.get_compression_failure_cooldown(42)


def test_a_cooldown_error_with_a_lone_surrogate_is_kept_escaped(db: SessionDB) -> None:
    make(db, "s1")
    db.record_compression_failure_cooldown("s1", time.time() + 60, "no file b'\udcff'")
    assert db.get_compression_failure_cooldown("s1")["error"] == "no file b'\\udcff'"


def test_recording_a_cooldown_never_raises_on_a_database_error(store: str, caplog) -> None:
    opened = SessionDB(store)
    make(opened, "s1")
    opened.close()
    with caplog.at_level(logging.WARNING, logger="hermes_store.facade"):
        opened.record_compression_failure_cooldown("s1", time.time() + 60, "x")
        opened.clear_compression_failure_cooldown("s1")
    assert "record_compression_failure_cooldown failed" in caplog.text


def test_a_non_numeric_cooldown_time_is_refused(db: SessionDB) -> None:
    make(db, "s1")
    with pytest.raises(TypeError):
        db.record_compression_failure_cooldown("s1", "soon")
    with pytest.raises(ValueError):
        db.record_compression_failure_cooldown("s1", float("nan"))
    assert column(db, "s1", "compression_failure_cooldown_until") is None


# --------------------------------------------------------------------------- streak


def test_the_fallback_streak_round_trips_and_never_goes_negative(db: SessionDB) -> None:
    make(db, "s1")
    assert db.get_compression_fallback_streak("s1") == 0
    db.set_compression_fallback_streak("s1", 3)
    assert db.get_compression_fallback_streak("s1") == 3
    db.set_compression_fallback_streak("s1", -4)
    assert db.get_compression_fallback_streak("s1") == 0
    db.set_compression_fallback_streak("s1", 2.9)
    assert db.get_compression_fallback_streak("s1") == 2
    db.set_compression_fallback_streak("s1", "5")
    assert db.get_compression_fallback_streak("s1") == 5


def test_a_non_numeric_streak_raises_before_writing(db: SessionDB) -> None:
    make(db, "s1")
    db.set_compression_fallback_streak("s1", 7)
    with pytest.raises(ValueError):
        db.set_compression_fallback_streak("s1", "many")
    with pytest.raises(TypeError):
        db.set_compression_fallback_streak("s1", None)
    with pytest.raises(ValueError):
        db.set_compression_fallback_streak("s1", float("inf"))
    assert db.get_compression_fallback_streak("s1") == 7


def test_the_streak_of_a_falsy_or_unknown_id_is_zero(db: SessionDB) -> None:
    db.set_compression_fallback_streak(None, 3)
    db.set_compression_fallback_streak("", 3)
    db.set_compression_fallback_streak("ghost", 3)
    for sid in (None, "", "ghost", 17):
        assert db.get_compression_fallback_streak(sid) == 0
    assert db.session_count() == 0


def test_reading_the_streak_never_raises_even_after_close(store: str) -> None:
    opened = SessionDB(store)
    make(opened, "s1")
    opened.set_compression_fallback_streak("s1", 4)
    opened.close()
    assert opened.get_compression_fallback_streak("s1") == 0


def test_a_non_integer_streak_in_an_adopted_sqlite_file_reads_as_zero(store_path: Path) -> None:
    # Only SQLite's loose typing can hold text in an INTEGER column (an old agent wrote it).
    with SessionDB(store_path) as store:
        make(store, "s1")
    raw = sqlite3.connect(store_path)
    raw.execute("UPDATE sessions SET compression_fallback_streak = 'lots' WHERE id = 's1'")
    raw.commit()
    raw.close()
    with SessionDB(store_path) as store:
        assert store.get_compression_fallback_streak("s1") == 0


# --------------------------------------------------------------------------- locks


def test_a_lock_has_one_holder_until_released(db: SessionDB) -> None:
    assert db.try_acquire_compression_lock("s1", "worker-a") is True
    assert db.get_compression_lock_holder("s1") == "worker-a"
    assert db.try_acquire_compression_lock("s1", "worker-b") is False
    db.release_compression_lock("s1", "worker-b")  # not its lock: nothing happens
    assert db.get_compression_lock_holder("s1") == "worker-a"
    db.release_compression_lock("s1", "worker-a")
    assert db.get_compression_lock_holder("s1") is None
    assert db.try_acquire_compression_lock("s1", "worker-b") is True


def test_reacquiring_an_own_live_lock_succeeds_without_extending_it(db: SessionDB) -> None:
    assert db.try_acquire_compression_lock("s1", "a", ttl_seconds=60)
    before = lock_row(db, "s1")
    assert db.try_acquire_compression_lock("s1", "a", ttl_seconds=3600)
    assert lock_row(db, "s1") == before


def test_an_expired_lock_goes_to_the_next_caller(db: SessionDB) -> None:
    assert db.try_acquire_compression_lock("s1", "a", ttl_seconds=-1)
    assert db.get_compression_lock_holder("s1") is None
    assert db.try_acquire_compression_lock("s1", "b") is True
    assert lock_row(db, "s1")["holder"] == "b"


def test_refresh_extends_only_the_holders_live_lock(db: SessionDB) -> None:
    db.try_acquire_compression_lock("s1", "a", ttl_seconds=60)
    first = lock_row(db, "s1")["expires_at"]
    assert db.refresh_compression_lock("s1", "b", ttl_seconds=600) is False
    assert db.refresh_compression_lock("s1", "a", ttl_seconds=600) is True
    assert lock_row(db, "s1")["expires_at"] > first
    assert db.refresh_compression_lock("s1", None) is False
    assert db.refresh_compression_lock("s1", "") is False


def test_refresh_never_revives_an_expired_lock(db: SessionDB) -> None:
    db.try_acquire_compression_lock("s1", "a", ttl_seconds=-1)
    assert db.refresh_compression_lock("s1", "a", ttl_seconds=600) is False
    assert db.get_compression_lock_holder("s1") is None


def test_any_id_can_be_locked_and_falsy_ids_are_neutral(db: SessionDB) -> None:
    assert db.try_acquire_compression_lock("no-such-session", "a") is True
    for sid in (None, ""):
        assert db.try_acquire_compression_lock(sid, "a") is False
        assert db.refresh_compression_lock(sid, "a") is False
        assert db.release_compression_lock(sid, "a") is None
        assert db.get_compression_lock_holder(sid) is None


def test_of_concurrent_acquirers_exactly_one_wins(db: SessionDB) -> None:
    n = 8
    start = threading.Barrier(n)
    results: dict[str, bool] = {}

    def contend(holder: str) -> None:
        start.wait()
        results[holder] = db.try_acquire_compression_lock("hot", holder)

    threads = [threading.Thread(target=contend, args=(f"w{i}",)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [h for h, won in results.items() if won]
    assert len(results) == n
    assert len(winners) == 1
    assert db.get_compression_lock_holder("hot") == winners[0]


def test_a_lock_that_cannot_be_written_is_not_taken(db: SessionDB, monkeypatch, caplog) -> None:
    monkeypatch.setattr("hermes_store.db.engine.WRITE_BUDGET_S", 0.3)
    with holding_write_lock(db), caplog.at_level(logging.WARNING, logger="hermes_store.facade"):
        assert db.try_acquire_compression_lock("s1", "a") is False
        assert db.refresh_compression_lock("s1", "a") is False
        db.release_compression_lock("s1", "a")
    assert "try_acquire_compression_lock failed" in caplog.text
    assert db.get_compression_lock_holder("s1") is None


# --------------------------------------------------------------------------- orphans


def test_finalize_ends_only_abandoned_continuations(db: SessionDB) -> None:
    now = time.time()
    old, recent = now - 8 * DAY, now - 6 * DAY
    make(db, "p", ended_at=old, end_reason="compression")
    make(db, "other_parent", ended_at=old, end_reason="user_exit")
    make(db, "orphan", parent="p", started_at=old, messages=1)
    make(db, "too_recent", parent="p", started_at=recent, messages=1)
    make(db, "called_api", parent="p", started_at=old, messages=1, api_call_count=1)
    make(db, "null_calls", parent="p", started_at=old, messages=1, api_call_count=None)
    make(db, "no_messages", parent="p", started_at=old)
    make(db, "wrong_parent", parent="other_parent", started_at=old, messages=1)
    make(db, "reason_only", parent="p", started_at=old, messages=1, end_reason="x")
    make(db, "root", started_at=old, messages=1)
    assert db.finalize_orphaned_compression_sessions() == 1
    row = db.get_session("orphan")
    assert row["end_reason"] == "orphaned_compression"
    assert row["ended_at"] >= now
    for sid in ("too_recent", "called_api", "null_calls", "no_messages", "wrong_parent",
                "root"):
        assert db.get_session(sid)["ended_at"] is None, sid
    assert db.get_session("reason_only")["end_reason"] == "x"
    assert db.finalize_orphaned_compression_sessions() == 0


# --------------------------------------------------------------------------- tip


def chain(store: SessionDB) -> None:
    """a (compression) → b (compression) → c (open)."""
    make(store, "a", started_at=BASE_TS, ended_at=BASE_TS + 100, end_reason="compression")
    make(store, "b", parent="a", started_at=BASE_TS + 100, ended_at=BASE_TS + 200,
         end_reason="compression")
    make(store, "c", parent="b", started_at=BASE_TS + 200, messages=1)


def test_the_tip_is_the_last_continuation(db: SessionDB) -> None:
    chain(db)
    assert [db.get_compression_tip(s) for s in ("a", "b", "c")] == ["c", "c", "c"]


def test_an_id_without_continuation_is_its_own_tip_even_unknown(db: SessionDB) -> None:
    make(db, "solo", ended_at=BASE_TS + 1, end_reason="user_exit")
    assert db.get_compression_tip("solo") == "solo"
    assert db.get_compression_tip("ghost") == "ghost"
    assert db.get_compression_tip("") == ""
    assert db.get_compression_tip(None) is None
    assert db.get_lineage_tip("ghost") is None  # the v11 method keeps its answer
    with pytest.raises(TypeError):
        db.get_compression_tip(7)


def test_the_step_prefers_compressed_then_open_then_newest_activity(db: SessionDB) -> None:
    make(db, "p", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "closed_new", parent="p", started_at=BASE_TS + 50, ended_at=BASE_TS + 60,
         end_reason="user_exit", messages=3)
    make(db, "open", parent="p", started_at=BASE_TS + 20)
    make(db, "compressed", parent="p", started_at=BASE_TS + 11, ended_at=BASE_TS + 12,
         end_reason="compression")
    assert db.get_compression_tip("p") == "compressed"
    set_columns(db, "compressed", end_reason="user_exit")
    assert db.get_compression_tip("p") == "open"
    set_columns(db, "open", ended_at=BASE_TS + 30, end_reason="user_exit")
    assert db.get_compression_tip("p") == "closed_new"


def test_activity_is_the_newest_message_before_started_at(db: SessionDB) -> None:
    make(db, "p", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "late_start", parent="p", started_at=BASE_TS + 500, ended_at=BASE_TS + 501,
         end_reason="user_exit")
    make(db, "busy", parent="p", started_at=BASE_TS + 11, ended_at=BASE_TS + 999,
         end_reason="user_exit")
    db.append_message("busy", "user", "late turn", timestamp=BASE_TS + 900)
    assert db.get_compression_tip("p") == "busy"


def test_branches_subagents_and_tool_sessions_are_not_continuations(db: SessionDB) -> None:
    make(db, "p", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "branch", parent="p", started_at=BASE_TS + 20, markers={"_branched_from": "p"})
    make(db, "subagent", parent="p", started_at=BASE_TS + 30,
         markers={"_delegate_from": "p"})
    make(db, "tool", "tool", parent="p", started_at=BASE_TS + 40)
    assert db.get_compression_tip("p") == "p"
    assert db.get_compression_lineage("p") == ["p"]


def test_a_continuation_started_before_its_parent_ended_still_counts(db: SessionDB) -> None:
    make(db, "p", ended_at=BASE_TS + 100, end_reason="compression")
    make(db, "early", parent="p", started_at=BASE_TS + 50)
    assert db.get_compression_tip("p") == "early"


def test_a_cycle_of_continuations_stops_the_walk(db: SessionDB) -> None:
    make(db, "x", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "y", parent="x", started_at=BASE_TS + 20, ended_at=BASE_TS + 30,
         end_reason="compression")
    set_columns(db, "x", parent_session_id="y")
    assert db.get_compression_tip("x") == "y"
    assert db.get_compression_tip("y") == "x"
    assert set(db.get_compression_lineage("x")) <= {"x", "y"}
    assert "x" in db.get_compression_lineage("x")


def test_the_v21_rule_and_the_v11_tip_both_stand(db: SessionDB) -> None:
    # The v11 walk prefers a child started after the end, here a branch; v21 skips markers.
    make(db, "p", ended_at=BASE_TS + 100, end_reason="compression")
    make(db, "cont", parent="p", started_at=BASE_TS + 50)
    make(db, "branch", parent="p", started_at=BASE_TS + 200, markers={"_branched_from": "p"})
    assert db.get_compression_tip("p") == "cont"
    assert db.get_lineage_tip("p") == "branch"


# --------------------------------------------------------------------------- lineage


def test_the_lineage_runs_root_to_tip_from_any_segment(db: SessionDB) -> None:
    chain(db)
    for sid in ("a", "b", "c"):
        assert db.get_compression_lineage(sid) == ["a", "b", "c"]


def test_unknown_ids_have_no_lineage_and_branch_children_stand_alone(db: SessionDB) -> None:
    chain(db)
    make(db, "marked", parent="b", started_at=BASE_TS + 300, markers={"_branched_from": "b"})
    make(db, "q", ended_at=BASE_TS + 10, end_reason="branched")
    make(db, "forked", parent="q", started_at=BASE_TS + 10)
    assert db.get_compression_lineage("ghost") == []
    assert db.get_compression_lineage(None) == []
    assert db.get_compression_lineage("marked") == ["marked"]
    assert db.get_compression_lineage("forked") == ["forked"]


def test_a_sibling_the_tip_step_passes_by_stands_alone(db: SessionDB) -> None:
    make(db, "p", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "winner", parent="p", started_at=BASE_TS + 20)
    make(db, "stale", parent="p", started_at=BASE_TS + 15, ended_at=BASE_TS + 16,
         end_reason="user_exit")
    assert db.get_compression_lineage("winner") == ["p", "winner"]
    assert db.get_compression_lineage("stale") == ["stale"]


def test_a_child_of_a_parent_ended_otherwise_starts_its_own_lineage(db: SessionDB) -> None:
    make(db, "p", ended_at=BASE_TS + 10, end_reason="user_exit")
    make(db, "child", parent="p", started_at=BASE_TS + 20)
    assert db.get_compression_lineage("child") == ["child"]
    assert db.get_compression_tip("p") == "p"


def test_the_v21_agents_own_store_keeps_its_lineages(v21_db: SessionDB) -> None:
    # The fixture's parents were ended after their continuations started.
    assert v21_db.get_compression_tip("20260707_060600_e4ca3a") == "20260808_070700_219dc0"
    assert v21_db.get_compression_lineage("20260808_070700_219dc0") == [
        "20260707_060600_e4ca3a", "20260808_070700_219dc0"]
    assert v21_db.get_compression_lineage("20261010_090900_33ce8e") == [
        "20261010_090900_33ce8e", "20261111_101000_2e75cf"]
    assert v21_db.get_compression_tip("20260101_000000_cea663") == "20260101_000000_cea663"
    assert v21_db.get_compression_fallback_streak("20260101_000000_cea663") == 0
    assert v21_db.get_compression_failure_cooldown("20260101_000000_cea663") is None
