"""v21 API (docs/v21.md#bulk): prune, candidates and archive over the ``**filters`` set, the
lineage-wide archive flag, and the automatic prune."""

from __future__ import annotations

import time

import pytest
from v21_stores import column, make

from hermes_store import SessionDB

NOW = time.time()
OLD = NOW - 200 * 86400
RECENT = NOW - 10 * 86400


def ended(db: SessionDB, sid: str, at: float, **columns: object) -> str:
    return make(db, sid, started_at=at, ended_at=at + 60, end_reason="user_exit", **columns)


def ids(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows]


# --------------------------------------------------------------------------- filters


@pytest.mark.parametrize(("filters", "expected"), [
    ({"title_like": "DOCKER"}, ["a"]),
    ({"title_like": "50%"}, ["b"]),
    ({"title_like": "5_%"}, []),
    ({"model_like": "sonnet"}, ["a"]),
    ({"branch_like": "feat/"}, ["b"]),
    ({"provider": "OpenRouter"}, ["a"]),
    ({"end_reason": "user_exit"}, ["a", "b"]),
    ({"user_id": "u1"}, ["a"]),
    ({"chat_id": 42}, ["b"]),
    ({"chat_type": "dm"}, ["b"]),
    ({"cwd_prefix": "/work/"}, ["a"]),
    ({"min_messages": 2}, ["b"]),
    ({"max_messages": 1}, ["a"]),
    ({"min_tool_calls": 1}, ["a"]),
    ({"max_tool_calls": 0}, ["b"]),
    ({"min_tokens": 150}, ["a"]),
    ({"max_tokens": 10}, ["b"]),
    ({"min_cost": 0.5}, ["a"]),
    ({"max_cost": 0.1}, ["b"]),
    ({"archived": True}, ["b"]),
    ({"archived": False}, ["a"]),
    ({"archived": None, "title_like": ""}, ["a", "b"]),
    ({"started_before": OLD + 5}, ["a"]),
    ({"started_after": OLD + 5}, ["b"]),
])
def test_each_filter_selects_on_the_tip_row(db: SessionDB, filters: dict,
                                            expected: list[str]) -> None:
    ended(db, "a", OLD, title="Docker build", model="claude-sonnet", billing_provider="openrouter",
          user_id="u1", cwd="/work/x", messages=1, tool_call_count=2, input_tokens=100,
          output_tokens=60, estimated_cost_usd=0.9, actual_cost_usd=None)
    ended(db, "b", OLD + 10, title="50% done", git_branch="feat/x", chat_id="42", chat_type="dm",
          messages=2, actual_cost_usd=0.05, estimated_cost_usd=5.0, archived=1)
    assert sorted(ids(db.list_prune_candidates(**filters))) == expected


def test_unknown_filters_and_wrong_types_are_refused(db: SessionDB) -> None:
    with pytest.raises(TypeError, match="title"):
        db.prune_sessions(title="x")
    with pytest.raises(TypeError):
        db.archive_sessions(min_messages="3")
    with pytest.raises(TypeError):
        db.list_prune_candidates(title_like=3)
    with pytest.raises(ValueError):
        db.prune_sessions(older_than_days=-1)


# --------------------------------------------------------------------------- prune


def test_prune_without_an_age_takes_every_ended_session(db: SessionDB) -> None:
    ended(db, "old", OLD)
    ended(db, "new", NOW - 60)
    make(db, "open", started_at=OLD)
    assert db.prune_sessions(older_than_days=None) == 2
    assert db.get_session("open") is not None


def test_prune_judges_a_lineage_by_its_tip_and_moves_it_whole(db: SessionDB) -> None:
    make(db, "root", started_at=OLD, ended_at=OLD + 60, end_reason="compression", messages=1)
    ended(db, "tip", OLD + 60, parent="root")
    make(db, "live_root", started_at=OLD, ended_at=OLD + 60, end_reason="compression")
    make(db, "live_tip", parent="live_root", started_at=OLD + 60)
    make(db, "fresh_root", started_at=OLD, ended_at=OLD + 60, end_reason="compression")
    ended(db, "fresh_tip", RECENT, parent="fresh_root")
    make(db, "sub", parent="root", started_at=OLD + 5, ended_at=OLD + 6, end_reason="done",
         markers={"_delegate_from": "root"}, messages=1)
    db.append_message("sub", "user", "recent", timestamp=NOW - 60)
    assert [r["id"] for r in db.list_prune_candidates(older_than_days=90)] == ["root", "tip"]
    assert db.prune_sessions(older_than_days=90) == 2
    assert db.get_session("root") is None and db.get_session("tip") is None
    assert column(db, "sub", "parent_session_id") is None  # prune orphans, never cascades
    for kept in ("live_root", "live_tip", "fresh_root", "fresh_tip"):
        assert db.get_session(kept) is not None


def test_prune_spares_pinned_lineages_and_bounds_started_at(db: SessionDB) -> None:
    ended(db, "pinned", OLD, pinned=1)
    ended(db, "early", OLD)
    ended(db, "late", OLD + 1000)
    assert db.prune_sessions(older_than_days=90, started_before=OLD + 500) == 1
    assert db.get_session("early") is None
    assert db.get_session("late") is not None and db.get_session("pinned") is not None


def test_candidates_write_nothing_and_come_oldest_first(db: SessionDB) -> None:
    ended(db, "second", OLD + 10, source="cli", title="T", model="m")
    ended(db, "first", OLD, source="cli")
    ended(db, "other_source", OLD, source="cron")
    rows = db.list_prune_candidates(90, "cli")
    assert ids(rows) == ["first", "second"]
    assert set(rows[1]) == {"id", "source", "title", "model", "started_at", "ended_at",
                            "message_count", "archived"}
    assert (rows[1]["title"], rows[1]["model"], rows[1]["archived"]) == ("T", "m", 0)
    assert db.get_session("first") is not None


# --------------------------------------------------------------------------- archive


def test_archive_sessions_archives_whole_lineages_once(db: SessionDB) -> None:
    make(db, "root", started_at=OLD, ended_at=OLD + 60, end_reason="compression")
    ended(db, "tip", OLD + 60, parent="root")
    ended(db, "single", OLD)
    ended(db, "pinned", OLD, pinned=1)
    ended(db, "young", NOW - 60)
    assert db.archive_sessions(older_than_days=90) == 3
    assert [column(db, s, "archived") for s in ("root", "tip", "single", "pinned", "young")] \
        == [1, 1, 1, 0, 0]
    assert db.archive_sessions(older_than_days=90) == 0
    assert db.get_session("root") is not None


def test_set_session_archived_moves_the_whole_lineage(db: SessionDB) -> None:
    make(db, "root", ended_at=1, end_reason="compression")
    make(db, "mid", parent="root", ended_at=2, end_reason="compression")
    make(db, "tip", parent="mid")
    make(db, "sub", parent="mid", markers={"_delegate_from": "mid"})
    assert db.set_session_archived("mid", True) is True
    assert [column(db, s, "archived") for s in ("root", "mid", "tip", "sub")] == [1, 1, 1, 0]
    assert db.set_session_archived("tip", True) is True
    assert db.set_session_archived("root", False) is True
    assert [column(db, s, "archived") for s in ("root", "mid", "tip")] == [0, 0, 0]
    assert db.set_session_archived("ghost", True) is False
    assert db.set_session_archived(None, True) is False


def test_a_pinned_segment_keeps_its_lineage_from_being_archived(db: SessionDB) -> None:
    make(db, "root", ended_at=1, end_reason="compression", archived=1)
    make(db, "tip", parent="root", pinned=1)
    assert db.set_session_archived("root", True) is False
    assert column(db, "tip", "archived") == 0
    assert db.set_session_archived("root", False) is True
    assert column(db, "root", "archived") == 0


# --------------------------------------------------------------------------- auto prune


def test_auto_prune_runs_once_per_interval_and_vacuums_after_pruning(db: SessionDB) -> None:
    ended(db, "old", OLD)
    first = db.maybe_auto_prune_and_vacuum(retention_days=90)
    assert first == {"skipped": False, "pruned": 1, "vacuumed": True}
    marker = float(db.get_meta("last_auto_prune"))
    assert NOW - 5 <= marker <= time.time()
    assert db.maybe_auto_prune_and_vacuum() == {"skipped": True, "pruned": 0, "vacuumed": False}
    again = db.maybe_auto_prune_and_vacuum(min_interval_hours=0)
    assert again == {"skipped": False, "pruned": 0, "vacuumed": False}
    assert float(db.get_meta("last_auto_prune")) >= marker


def test_an_unparsable_marker_counts_as_no_prior_run(db: SessionDB) -> None:
    db.set_meta("last_auto_prune", "yesterday")
    ended(db, "old", OLD)
    assert db.maybe_auto_prune_and_vacuum(vacuum=False) == {
        "skipped": False, "pruned": 1, "vacuumed": False}


def test_auto_prune_never_raises_and_a_failed_prune_leaves_no_marker(db: SessionDB) -> None:
    path = db.db_path
    db.close()
    outcome = db.maybe_auto_prune_and_vacuum()
    assert outcome["skipped"] is False and outcome["pruned"] == 0
    assert "closed" in outcome["error"]
    with SessionDB(path) as reopened:
        assert reopened.get_meta("last_auto_prune") is None


def test_a_v21_store_lists_every_ended_lineage_as_candidates(v21_db: SessionDB) -> None:
    rows = v21_db.list_prune_candidates()
    assert "20260505_040400_c9717e" not in ids(rows)  # open
    assert {"20260707_060600_e4ca3a", "20260808_070700_219dc0"} <= set(ids(rows))
    starts = [r["started_at"] for r in rows]
    assert starts == sorted(starts)
