"""v21 API (docs/v21.md#other): what a session ran in and with: working directories, repository roots,
model, billing route and ``model_config``."""

from __future__ import annotations

import sqlite3

import pytest
from v21_stores import BASE_TS, column, config_of, holding_write_lock, make

from hermes_store import SessionDB

# --------------------------------------------------------------------------- cwd


def test_the_cwd_is_set_and_git_columns_only_when_given(db: SessionDB) -> None:
    make(db, "s1")
    db.update_session_cwd("s1", "/work/repo", git_branch=" main ", git_repo_root="/work/repo ")
    row = db.get_session("s1")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == (
        "/work/repo", "main", "/work/repo")
    db.update_session_cwd("s1", "/tmp/scratch", git_branch="  ", git_repo_root=None)
    row = db.get_session("s1")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == (
        "/tmp/scratch", "main", "/work/repo")


def test_a_cwd_update_without_session_or_cwd_does_nothing(db: SessionDB) -> None:
    make(db, "s1", cwd="/kept")
    db.update_session_cwd("s1", "")
    db.update_session_cwd("s1", None, git_branch="dev")
    db.update_session_cwd(None, "/x")
    db.update_session_cwd("ghost", "/x")
    assert (column(db, "s1", "cwd"), column(db, "s1", "git_branch")) == ("/kept", None)
    assert db.get_session("ghost") is None
    with pytest.raises(TypeError):
        db.update_session_cwd("s1", 42)


def test_distinct_cwds_count_sessions_and_their_latest_activity(db: SessionDB) -> None:
    make(db, "a", cwd="/repo", started_at=BASE_TS, ended_at=BASE_TS + 50,
         end_reason="user_exit")
    make(db, "b", cwd="/repo", started_at=BASE_TS + 10)
    make(db, "c", parent="a", cwd="/repo/sub", started_at=BASE_TS + 5)
    make(db, "d", cwd="/repo ", started_at=BASE_TS + 1)
    make(db, "blank", cwd="   ")
    make(db, "none")
    make(db, "shelved", cwd="/old", archived=1, started_at=BASE_TS + 99)
    found = {r["cwd"]: r for r in db.distinct_session_cwds()}
    assert found == {
        "/repo": {"cwd": "/repo", "sessions": 2, "last_active": BASE_TS + 50},
        "/repo/sub": {"cwd": "/repo/sub", "sessions": 1, "last_active": BASE_TS + 5},
        "/repo ": {"cwd": "/repo ", "sessions": 1, "last_active": BASE_TS + 1},
    }
    with_archived = {r["cwd"]: r for r in db.distinct_session_cwds(include_archived=True)}
    assert with_archived["/old"] == {"cwd": "/old", "sessions": 1,
                                     "last_active": BASE_TS + 99}


def test_repo_roots_are_backfilled_only_where_missing(db: SessionDB) -> None:
    make(db, "a", cwd="/repo/x")
    make(db, "b", cwd="/repo/x", git_repo_root="")
    make(db, "c", cwd="/repo/x", git_repo_root="/elsewhere")
    make(db, "d", cwd="/repo/x/deeper")
    make(db, "e", cwd="/other")
    db.backfill_repo_roots({"/repo/x": "/repo", "/other": "", "": "/nowhere"})
    assert [column(db, s, "git_repo_root") for s in "abcde"] == [
        "/repo", "/repo", "/elsewhere", None, None]


def test_a_backfill_without_pairs_writes_nothing(db: SessionDB, monkeypatch) -> None:
    monkeypatch.setattr("hermes_store.db.engine.WRITE_BUDGET_S", 0.2)
    with holding_write_lock(db):
        db.backfill_repo_roots({})
        db.backfill_repo_roots({"/a": "", "": "/b"})
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            db.backfill_repo_roots({"/a": "/b"})
    with pytest.raises(TypeError):
        db.backfill_repo_roots([("/a", "/b")])


# --------------------------------------------------------------------------- settings


def test_the_model_is_set_unconditionally(db: SessionDB) -> None:
    make(db, "s1")
    db.update_session_model("s1", "anthropic/claude-sonnet-4.6")
    assert column(db, "s1", "model") == "anthropic/claude-sonnet-4.6"
    db.update_session_model("s1", "openai/gpt-5")
    assert column(db, "s1", "model") == "openai/gpt-5"
    db.update_session_model("s1", None)
    assert column(db, "s1", "model") is None
    db.update_session_model("ghost", "m")
    db.update_session_model("", "m")
    assert db.get_session("ghost") is None


def test_a_new_billing_route_replaces_the_old_and_drops_the_prompt(db: SessionDB) -> None:
    make(db, "s1", billing_provider="openrouter", billing_base_url="https://openrouter.ai",
         billing_mode="api")
    db.update_system_prompt("s1", "You are served by OpenRouter.")
    db.update_session_billing_route("s1", provider="anthropic", base_url=None)
    row = db.get_session("s1")
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "anthropic", None, "api")
    assert row["system_prompt"] is None
    db.update_session_billing_route("s1", provider="local", base_url="http://127.0.0.1:8080",
                                    billing_mode="free")
    row = db.get_session("s1")
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "local", "http://127.0.0.1:8080", "free")
    db.update_session_billing_route("ghost", provider="x", base_url="y")
    assert db.get_session("ghost") is None


def test_meta_replaces_model_config_as_given(db: SessionDB) -> None:
    make(db, "s1", markers={"_branched_from": "p"})
    db.update_session_meta("s1", '{"reasoning_effort": "high"}')
    assert config_of(db, "s1") == {"reasoning_effort": "high"}  # the caller dropped the marker
    db.update_session_meta("s1", "not json at all", model="m2")
    assert (column(db, "s1", "model_config"), column(db, "s1", "model")) == (
        "not json at all", "m2")
    db.update_session_meta("s1", '{"a": 1}')
    assert column(db, "s1", "model") == "m2"
    with pytest.raises(TypeError):
        db.update_session_meta("s1", {"a": 1})
    db.update_session_meta(None, "{}")


def test_workspace_in_the_v21_agents_store(v21_db: SessionDB) -> None:
    assert v21_db.distinct_session_cwds(include_archived=True) == []
    sid = "20260101_000000_cea663"
    v21_db.update_session_cwd(sid, "/home/u/proj", git_branch="main")
    v21_db.backfill_repo_roots({"/home/u/proj": "/home/u/proj"})
    row = v21_db.get_session(sid)
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == (
        "/home/u/proj", "main", "/home/u/proj")
    assert row["message_count"] == 40
    assert [r["sessions"] for r in v21_db.distinct_session_cwds()] == [1]
