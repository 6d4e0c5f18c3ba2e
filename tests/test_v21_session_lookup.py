"""v21 API (docs/v21.md#other): finding a session: the resume target, search by id, a cron job's runs."""

from __future__ import annotations

import sqlite3
import time

import pytest
from v21_stores import BASE_TS, make, set_columns

from hermes_store import SessionDB
from hermes_store.repo import lookup

# --------------------------------------------------------------------------- resume


def test_resume_goes_to_the_compression_tip(db: SessionDB) -> None:
    make(db, "a", ended_at=BASE_TS + 10, end_reason="compression", messages=1)
    make(db, "b", parent="a", started_at=BASE_TS + 10, messages=2)
    assert db.resolve_resume_session_id("a") == "b"
    assert db.resolve_resume_session_id("b") == "b"


def test_resume_input_that_names_nothing_comes_back_as_is(db: SessionDB) -> None:
    assert db.resolve_resume_session_id(None) is None
    assert db.resolve_resume_session_id("") == ""
    assert db.resolve_resume_session_id("ghost") == "ghost"
    with pytest.raises(TypeError):
        db.resolve_resume_session_id(3)


def test_resume_follows_the_newest_child_to_the_deepest_with_messages(db: SessionDB) -> None:
    make(db, "tip", messages=1)
    make(db, "older_child", parent="tip", started_at=BASE_TS + 5, messages=1)
    make(db, "child", parent="tip", started_at=BASE_TS + 10, ended_at=BASE_TS + 11,
         end_reason="user_exit", messages=1)
    make(db, "grandchild", parent="child", started_at=BASE_TS + 20)
    assert db.resolve_resume_session_id("tip") == "child"


def test_resume_stays_at_the_tip_when_nothing_below_holds_messages(db: SessionDB) -> None:
    make(db, "tip")
    make(db, "child", parent="tip", started_at=BASE_TS + 10)
    assert db.resolve_resume_session_id("tip") == "tip"


def test_resume_never_follows_branches_subagents_or_tools(db: SessionDB) -> None:
    make(db, "tip", messages=1)
    make(db, "branch", parent="tip", started_at=BASE_TS + 10, messages=1,
         markers={"_branched_from": "tip"})
    make(db, "subagent", parent="tip", started_at=BASE_TS + 20, messages=1,
         markers={"_delegate_from": "tip"})
    make(db, "tool", "tool", parent="tip", started_at=BASE_TS + 30, messages=1)
    assert db.resolve_resume_session_id("tip") == "tip"


def test_resume_walks_at_most_32_sessions_and_survives_a_cycle(db: SessionDB) -> None:
    make(db, "n0", messages=1)
    for i in range(1, 40):
        make(db, f"n{i}", parent=f"n{i - 1}", started_at=BASE_TS + i, messages=1)
    assert db.resolve_resume_session_id("n0") == "n31"
    make(db, "x", messages=1)
    make(db, "y", parent="x", started_at=BASE_TS + 1, messages=1)
    set_columns(db, "x", parent_session_id="y")
    assert db.resolve_resume_session_id("x") in {"x", "y"}


def test_resume_starts_at_the_id_when_the_tip_cannot_be_read(db: SessionDB,
                                                             monkeypatch) -> None:
    make(db, "a", ended_at=BASE_TS + 10, end_reason="compression", messages=1)
    make(db, "b", parent="a", started_at=BASE_TS + 10, ended_at=BASE_TS + 11,
         end_reason="user_exit", messages=1)

    def unreadable(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr("hermes_store.repo.compression.compression_tip", unreadable)
    # From "a" itself the walk still reaches the child holding messages.
    assert db.resolve_resume_session_id("a") == "b"


# --------------------------------------------------------------------------- search by id


def ids(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows]


def test_id_search_ranks_exact_then_prefix_then_substring(db: SessionDB) -> None:
    make(db, "xx_abc_1", started_at=BASE_TS + 30)
    make(db, "abc_def", started_at=BASE_TS + 20)
    make(db, "ABC", started_at=BASE_TS + 10)
    make(db, "unrelated", started_at=BASE_TS + 40)
    assert ids(db.search_sessions_by_id("  abc ")) == ["ABC", "abc_def", "xx_abc_1"]
    assert ids(db.search_sessions_by_id("abc", limit=2)) == ["ABC", "abc_def"]


def test_id_search_keeps_activity_order_within_a_rank(db: SessionDB) -> None:
    make(db, "job-1", started_at=BASE_TS)
    make(db, "job-2", started_at=BASE_TS + 10)
    db.append_message("job-1", "user", "recent", timestamp=BASE_TS + 100)
    assert ids(db.search_sessions_by_id("job")) == ["job-1", "job-2"]


def test_id_search_without_a_needle_or_room_finds_nothing(db: SessionDB) -> None:
    make(db, "abc")
    for query, limit in ((None, 20), ("", 20), ("   ", 20), ("abc", 0), ("abc", -1)):
        assert db.search_sessions_by_id(query, limit=limit) == []
    with pytest.raises(TypeError):
        db.search_sessions_by_id(5)


def test_id_search_takes_wildcards_literally(db: SessionDB) -> None:
    make(db, "a_c")
    make(db, "abc")
    make(db, "a%c")
    assert ids(db.search_sessions_by_id("a_c")) == ["a_c"]
    assert ids(db.search_sessions_by_id("a%")) == ["a%c"]


def test_id_search_finds_a_lineage_by_any_segment_and_shows_its_tip(db: SessionDB) -> None:
    make(db, "root-1", ended_at=BASE_TS + 10, end_reason="compression", messages=1)
    make(db, "cont-77", parent="root-1", started_at=BASE_TS + 10, messages=1,
         cwd="/work/repo", git_branch="main")
    for query in ("root-1", "cont-77", "-"):
        rows = db.search_sessions_by_id(query)
        assert ids(rows) == ["cont-77"], query
        assert rows[0]["_lineage_root_id"] == "root-1"
        assert rows[0]["started_at"] == BASE_TS
        assert (rows[0]["cwd"], rows[0]["git_branch"]) == ("/work/repo", "main")


def test_id_search_hides_children_but_shows_branches(db: SessionDB) -> None:
    make(db, "p-1", ended_at=BASE_TS + 10, end_reason="branched")
    make(db, "p-1-branch", parent="p-1", started_at=BASE_TS + 20)
    make(db, "p-1-sub", parent="p-1", started_at=BASE_TS + 5,
         markers={"_delegate_from": "p-1"})
    make(db, "q-1", ended_at=BASE_TS + 10, end_reason="user_exit")
    make(db, "q-1-child", parent="q-1", started_at=BASE_TS + 5)
    make(db, "orphan-sub", markers={"_delegate_from": "__orphaned__"})
    assert sorted(ids(db.search_sessions_by_id("-"))) == ["p-1", "p-1-branch", "q-1"]
    assert ids(db.search_sessions_by_id("sub")) == []


def test_id_search_includes_archived_sessions_unless_asked_not_to(db: SessionDB) -> None:
    make(db, "kept-1")
    make(db, "stored-1", archived=1)
    assert sorted(ids(db.search_sessions_by_id("-1"))) == ["kept-1", "stored-1"]
    assert ids(db.search_sessions_by_id("-1", include_archived=False)) == ["kept-1"]


def test_id_search_in_the_v21_agents_store(v21_db: SessionDB) -> None:
    for query in ("E4CA3A", "219dc0"):
        rows = v21_db.search_sessions_by_id(query)
        assert ids(rows) == ["20260808_070700_219dc0"], query
        assert rows[0]["_lineage_root_id"] == "20260707_060600_e4ca3a"
        assert rows[0]["title"] == "数据库 迁移 6 #2"
    assert ids(v21_db.search_sessions_by_id("2026011")) == ["20260113_121200_33e82d"]
    assert len(v21_db.search_sessions_by_id("2026")) == 14


# --------------------------------------------------------------------------- cron runs


def test_cron_runs_are_one_jobs_sessions_newest_first(db: SessionDB) -> None:
    make(db, "cron_alpha_20260101_030000", "cron", started_at=BASE_TS, messages=1)
    make(db, "cron_alpha_20260102_030000", "cron", started_at=BASE_TS + 86400,
         ended_at=BASE_TS + 86500, end_reason="compression", archived=1)
    make(db, "cron_alpha_20260102_030001", "cron", started_at=BASE_TS + 86400,
         parent="cron_alpha_20260102_030000")
    make(db, "cron_alpha2_20260103_030000", "cron", started_at=BASE_TS + 2 * 86400)
    make(db, "cron_Alpha_20260103_030000", "cron", started_at=BASE_TS + 2 * 86400)
    make(db, "xcron_alpha_20260103_030000", "cron", started_at=BASE_TS + 2 * 86400)
    make(db, "cron_alpha_20260104_030000", "cli", started_at=BASE_TS + 3 * 86400)
    rows = db.list_cron_job_runs("alpha")
    assert ids(rows) == ["cron_alpha_20260102_030001", "cron_alpha_20260102_030000",
                         "cron_alpha_20260101_030000"]
    assert "_lineage_root_id" not in rows[1]
    assert rows[2]["preview"] == "turn 0 of cron_alpha_20260101_030000"
    assert rows[2]["last_active"] == BASE_TS + 1
    assert ids(db.list_cron_job_runs("alpha", limit=1, offset=1)) == [
        "cron_alpha_20260102_030000"]
    assert db.list_cron_job_runs("beta") == []


def test_a_job_id_holding_nul_or_u_ffff_names_exactly_its_own_runs(db: SessionDB) -> None:
    # PostgreSQL stores NUL and U+FFFF escaped (two characters each): lengths must not drift.
    for job in ("a\x00b", "a\uffffb", "a"):
        make(db, f"cron_{job}_20260101_030000", "cron")
    make(db, "cron_a\x00_20260101_030000", "cron")
    assert ids(db.list_cron_job_runs("a\x00b")) == ["cron_a\x00b_20260101_030000"]
    assert ids(db.list_cron_job_runs("a\uffffb")) == ["cron_a\uffffb_20260101_030000"]
    assert ids(db.list_cron_job_runs("a\x00")) == ["cron_a\x00_20260101_030000"]
    assert ids(db.list_cron_job_runs("a")) == ["cron_a_20260101_030000"]


def test_cron_run_arguments_are_checked(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.list_cron_job_runs(None)
    with pytest.raises(ValueError):
        db.list_cron_job_runs("alpha", limit=-1)
    with pytest.raises(TypeError):
        db.list_cron_job_runs("alpha", offset="1")


@pytest.mark.sqlite_only
def test_cron_runs_are_an_index_range_on_sqlite(db: SessionDB) -> None:
    query = lookup.cron_runs_query("alpha", limit=20, offset=0, now=time.time())
    compiled = query.compile(db.engine)
    params = [compiled.params[key] for key in compiled.positiontup]
    raw = sqlite3.connect(db.db_path)
    try:
        plan = [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {compiled}", params)]
    finally:
        raw.close()
    assert any("idx_sessions_source_id (source=? AND id>? AND id<?)" in step for step in plan)
    assert not any(step.startswith("SCAN sessions") for step in plan)


def test_cron_runs_are_an_index_range_on_postgresql(pg_store: str) -> None:
    with SessionDB(pg_store) as store:
        for n in range(200):
            make(store, f"cron_job{n % 20}_2026010{n % 9}_{n:06d}", "cron",
                 started_at=BASE_TS + n)
        query = lookup.cron_runs_query("job7", limit=20, offset=0, now=time.time())
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE sessions")
            # A table this small is cheapest to scan: forbid scans to see what the index serves.
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            compiled = query.compile(conn)
            plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN {compiled}",
                                                   compiled.params).scalars())
    # The id prefix is a range of an index on id (the key or idx_sessions_source_id: the
    # planner's pick), never a scan of every cron row.
    assert "Seq Scan on sessions" not in plan, plan
    conds = [line.replace('"', "") for line in plan.splitlines() if "Index Cond" in line]
    assert any("id >= 'cron_job7_'" in c and "id < 'cron_job7`'" in c for c in conds), plan
