"""v21 API (docs/v21.md#handoff): the handoff state machine, NULL → pending → running → completed | failed."""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest
from v21_stores import BASE_TS, make

from hermes_store import SessionDB


def test_a_handoff_runs_request_claim_complete(db: SessionDB) -> None:
    make(db, "s1")
    assert db.get_handoff_state("s1") == {"state": None, "platform": None, "error": None}
    assert db.request_handoff("s1", "telegram") is True
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "telegram",
                                          "error": None}
    assert db.claim_handoff("s1") is True
    assert db.get_handoff_state("s1")["state"] == "running"
    db.complete_handoff("s1")
    assert db.get_handoff_state("s1") == {"state": "completed", "platform": "telegram",
                                          "error": None}


def test_a_handoff_under_way_cannot_be_requested_again(db: SessionDB) -> None:
    make(db, "s1")
    assert db.request_handoff("s1", "telegram")
    assert db.request_handoff("s1", "discord") is False
    db.claim_handoff("s1")
    assert db.request_handoff("s1", "discord") is False
    assert db.get_handoff_state("s1")["platform"] == "telegram"


def test_terminal_states_may_be_requested_again_and_clear_the_error(db: SessionDB) -> None:
    make(db, "s1")
    db.request_handoff("s1", "telegram")
    db.claim_handoff("s1")
    db.fail_handoff("s1", "platform unreachable")
    assert db.get_handoff_state("s1") == {"state": "failed", "platform": "telegram",
                                          "error": "platform unreachable"}
    assert db.request_handoff("s1", "discord") is True
    assert db.get_handoff_state("s1") == {"state": "pending", "platform": "discord",
                                          "error": None}
    db.complete_handoff("s1")
    assert db.request_handoff("s1", "slack") is True


def test_only_a_pending_handoff_can_be_claimed(db: SessionDB) -> None:
    make(db, "s1")
    assert db.claim_handoff("s1") is False
    db.request_handoff("s1", "telegram")
    assert db.claim_handoff("s1") is True
    assert db.claim_handoff("s1") is False


def test_of_concurrent_claimers_exactly_one_wins(db: SessionDB) -> None:
    make(db, "s1")
    db.request_handoff("s1", "telegram")
    n = 6
    start = threading.Barrier(n)
    won: list[bool] = []

    def claim() -> None:
        start.wait()
        won.append(db.claim_handoff("s1"))

    threads = [threading.Thread(target=claim) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * (n - 1) + [True]


def test_complete_and_fail_apply_from_any_state(db: SessionDB) -> None:
    make(db, "s1")
    db.fail_handoff("s1", "never requested")
    assert db.get_handoff_state("s1")["state"] == "failed"
    db.complete_handoff("s1")
    assert db.get_handoff_state("s1") == {"state": "completed", "platform": None,
                                          "error": None}


def test_a_failure_message_is_cut_to_500_characters(db: SessionDB) -> None:
    make(db, "s1")
    db.fail_handoff("s1", "x" * 2000)
    assert db.get_handoff_state("s1")["error"] == "x" * 500
    with pytest.raises(TypeError):
        db.fail_handoff("s1", RuntimeError("boom"))
    with pytest.raises(TypeError):
        db.fail_handoff("s1", None)


def test_unknown_and_falsy_sessions_have_no_handoff(db: SessionDB) -> None:
    for sid in ("ghost", "", None):
        assert db.request_handoff(sid, "telegram") is False
        assert db.claim_handoff(sid) is False
        db.complete_handoff(sid)
        db.fail_handoff(sid, "x")
        assert db.get_handoff_state(sid) is None
    assert db.session_count() == 0


def test_pending_handoffs_are_listed_oldest_first(db: SessionDB) -> None:
    for n, sid in enumerate(("late", "early", "running", "idle")):
        make(db, sid, started_at=BASE_TS + (0 if sid == "early" else 10 + n))
    for sid in ("late", "early", "running"):
        db.request_handoff(sid, "telegram")
    db.claim_handoff("running")
    rows = db.list_pending_handoffs()
    assert [r["id"] for r in rows] == ["early", "late"]
    assert rows[0]["handoff_platform"] == "telegram"
    assert "compression_fallback_streak" in rows[0]


def test_the_readers_answer_nothing_on_a_read_error(store: str, caplog) -> None:
    opened = SessionDB(store)
    make(opened, "s1")
    opened.request_handoff("s1", "telegram")
    opened.close()
    with caplog.at_level(logging.WARNING, logger="hermes_store.facade"):
        assert opened.get_handoff_state("s1") is None
        assert opened.list_pending_handoffs() == []
    assert "list_pending_handoffs failed" in caplog.text
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened.request_handoff("s1", "telegram")


def test_sessions_of_the_v21_agents_store_start_without_handoff(v21_db: SessionDB) -> None:
    sid = "20260505_040400_c9717e"
    assert v21_db.get_handoff_state(sid) == {"state": None, "platform": None, "error": None}
    assert v21_db.list_pending_handoffs() == []
    assert v21_db.request_handoff(sid, "telegram")
    assert [r["id"] for r in v21_db.list_pending_handoffs()] == [sid]
