"""The agent's one-time data steps run once, on adoption, for files stamped below the release
that introduced them: delegate tagging (16), gateway backfill (18), usage seed (20)
(docs/v21.md#open-time-behaviour)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_store import SessionDB
from hermes_store.compat import DEFERRED_INDEX_SQL, SCHEMA_SQL
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate


def _agent_store(path: Path, version: int, sessions: list[dict[str, Any]],
                 messages: list[tuple[str, str]] = ()) -> Path:
    """A file as the agent at ``version`` left it: its schema, its stamp, its rows."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_SQL + DEFERRED_INDEX_SQL)
    con.execute("INSERT INTO schema_version VALUES (?)", (version,))
    for row in sessions:
        row = {"source": "cli", "started_at": 1_000.0, **row}
        con.execute(f"INSERT INTO sessions ({', '.join(row)}) VALUES "
                    f"({', '.join('?' * len(row))})", list(row.values()))
    for n, (sid, role) in enumerate(messages):
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES (?, ?, ?, ?)", (sid, role, f"{role} {n}", 2_000.0 + n))
    con.commit()
    con.close()
    return path


def _configs(path: Path) -> dict[str, Any]:
    con = sqlite3.connect(path)
    try:
        return {sid: (json.loads(cfg) if cfg and cfg.startswith("{") else cfg)
                for sid, cfg in con.execute("SELECT id, model_config FROM sessions")}
    finally:
        con.close()


def _one(path: Path, sql: str, *params: Any) -> Any:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql, params).fetchone()
    finally:
        con.close()


def _usage(path: Path) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(
            "SELECT session_id, model, billing_provider, billing_base_url, billing_mode, "
            "api_call_count, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd, "
            "cost_status, cost_source, first_seen, last_seen "
            "FROM session_model_usage ORDER BY session_id").fetchall()
    finally:
        con.close()


DELEGATE_ROWS = [
    {"id": "parent", "title": "Parent", "ended_at": 1_500.0, "end_reason": "user_exit"},
    {"id": "sub", "parent_session_id": "parent", "started_at": 1_100.0},
    {"id": "tuned", "parent_session_id": "parent", "model_config": '{"temperature": 0}'},
    {"id": "odd", "parent_session_id": "parent", "model_config": "[1, 2]"},
    {"id": "marked", "parent_session_id": "parent", "model_config": '{"_branched_from": "x"}'},
    {"id": "compressed", "title": "C", "ended_at": 1_200.0, "end_reason": "compression"},
    {"id": "continuation", "parent_session_id": "compressed", "started_at": 1_300.0},
    {"id": "forked", "title": "F", "ended_at": 1_200.0, "end_reason": "branched"},
    {"id": "branch", "parent_session_id": "forked", "started_at": 1_250.0},
    {"id": "early", "parent_session_id": "forked", "started_at": 1_100.0},
    {"id": "orphan"},
    {"id": "titled", "title": "Has a title"},
    {"id": "chatty", "message_count": 26},
    {"id": "no_tools"},
]
DELEGATE_MESSAGES = [("orphan", "user"), ("orphan", "tool"), ("titled", "tool"),
                     ("chatty", "tool"), ("no_tools", "user"), ("parent", "tool")]


def test_delegate_tagging_below_16_marks_subagents_and_orphans(tmp_path: Path) -> None:
    path = _agent_store(tmp_path / "s.db", 15, DELEGATE_ROWS, DELEGATE_MESSAGES)
    SessionDB(path).close()
    configs = _configs(path)
    assert configs["sub"] == {"_delegate_from": "parent"}
    assert configs["tuned"] == {"temperature": 0, "_delegate_from": "parent"}
    assert configs["early"] == {"_delegate_from": "forked"}  # started before the fork
    assert configs["orphan"] == {"_delegate_from": "__orphaned__"}
    assert configs["odd"] == "[1, 2]"  # not a JSON object: skipped
    assert configs["marked"] == {"_branched_from": "x"}
    for untouched in ("continuation", "branch", "titled", "chatty", "no_tools", "parent"):
        assert configs[untouched] is None, untouched


@pytest.mark.parametrize("version", [16, 21])
def test_delegate_tagging_does_not_run_from_16_on(tmp_path: Path, version: int) -> None:
    path = _agent_store(tmp_path / "s.db", version, DELEGATE_ROWS, DELEGATE_MESSAGES)
    SessionDB(path).close()
    assert _configs(path)["sub"] is None and _configs(path)["orphan"] is None


def _gateway_index(home: Path, entries: dict[str, Any]) -> None:
    (home / "sessions").mkdir(parents=True, exist_ok=True)
    (home / "sessions" / "sessions.json").write_text(json.dumps(entries))


GATEWAY_ROWS = [{"id": "g1", "source": "telegram"},
                {"id": "g2", "source": "discord", "chat_type": "channel", "session_key": "kept"},
                {"id": "g3", "source": "slack"}]
GATEWAY_INDEX = {
    "agent:telegram:dm:42": {"session_id": "g1", "chat_type": "dm", "display_name": "Ann",
                             "origin": {"chat_id": 42, "thread_id": 7, "platform": "telegram"},
                             "memory_flushed": True},
    "agent:discord:x": {"session_id": "g2", "session_key": "explicit", "chat_type": "group",
                        "origin": {"chat_id": "c9"}},
    "_meta": {"session_id": "g3"},
    "broken": "not an object",
    "no_id": {"chat_type": "dm"},
}


def test_the_gateway_backfill_below_18_fills_only_empty_columns(tmp_path: Path) -> None:
    path = _agent_store(tmp_path / "state.db", 17, GATEWAY_ROWS)
    _gateway_index(tmp_path, GATEWAY_INDEX)
    with SessionDB(path) as db:
        g1, g2, g3 = (db.get_session(s) for s in ("g1", "g2", "g3"))
    assert (g1["session_key"], g1["chat_id"], g1["thread_id"], g1["chat_type"],
            g1["display_name"], g1["expiry_finalized"]) == (
        "agent:telegram:dm:42", "42", "7", "dm", "Ann", 1)
    assert json.loads(g1["origin_json"]) == GATEWAY_INDEX["agent:telegram:dm:42"]["origin"]
    assert (g2["session_key"], g2["chat_type"], g2["chat_id"], g2["expiry_finalized"]) == (
        "kept", "channel", "c9", 0)
    assert g3["session_key"] is None


def test_the_gateway_backfill_does_not_run_from_18_on(tmp_path: Path) -> None:
    path = _agent_store(tmp_path / "state.db", 18, GATEWAY_ROWS)
    _gateway_index(tmp_path, GATEWAY_INDEX)
    with SessionDB(path) as db:
        assert db.get_session("g1")["session_key"] is None


USAGE_ROWS = [
    {"id": "u1", "model": "gpt-x", "billing_provider": "openai", "input_tokens": 100,
     "output_tokens": 20, "api_call_count": 3, "estimated_cost_usd": 0.5,
     "cost_status": "estimated", "started_at": 1_000.0, "ended_at": 1_100.0},
    {"id": "u2", "reasoning_tokens": 5, "started_at": 2_000.0},
    {"id": "u3", "input_tokens": 0, "output_tokens": 0},
]


def test_the_usage_seed_below_20_rolls_each_session_up_once(tmp_path: Path) -> None:
    path = _agent_store(tmp_path / "s.db", 19, USAGE_ROWS)
    SessionDB(path).close()
    seeded = _usage(path)
    assert seeded == [
        ("u1", "gpt-x", "openai", "", "", 3, 100, 20, 0, 0, 0, 0.5, 0.0, "estimated", None,
         1_000.0, 1_100.0),
        ("u2", "unknown", "", "", "", 0, 0, 0, 0, 0, 5, 0.0, 0.0, None, None, 2_000.0, 2_000.0),
    ]
    engine_mod.dispose_all()
    SessionDB(path).close()  # a second open: recorded by the stamp, never again
    assert _usage(path) == seeded
    assert _one(path, "SELECT MAX(version) FROM schema_version") == (21,)


def test_the_usage_seed_does_not_run_from_20_on(tmp_path: Path) -> None:
    path = _agent_store(tmp_path / "s.db", 20, USAGE_ROWS)
    SessionDB(path).close()
    assert _usage(path) == []


def test_the_cli_upgrade_runs_the_steps_too(tmp_path: Path) -> None:
    path = _agent_store(tmp_path / "s.db", 15, USAGE_ROWS + DELEGATE_ROWS, DELEGATE_MESSAGES)
    migrate.upgrade(path)
    assert len(_usage(path)) == 2
    assert _configs(path)["sub"] == {"_delegate_from": "parent"}
    assert _one(path, "SELECT MAX(version) FROM schema_version") == (21,)


def test_a_failing_step_is_logged_and_skipped_and_the_open_goes_on(tmp_path: Path,
                                                                    caplog) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_store.repo.backfills")
    path = _agent_store(tmp_path / "state.db", 15, USAGE_ROWS + GATEWAY_ROWS)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "sessions.json").write_text("{not json")
    with SessionDB(path) as db:
        assert db.get_session("g1")["session_key"] is None
    assert len(_usage(path)) == 2  # the step after the failing one ran
    assert any("gateway backfill skipped" in r.getMessage() for r in caplog.records)


def test_the_agents_v21_store_runs_no_step(legacy_db) -> None:
    path = legacy_db(21)
    before = _usage(path)
    configs = _configs(path)
    SessionDB(path).close()
    assert _usage(path) == before and len(before) == 16
    assert _configs(path) == configs


# --------------------------------------------------------------------------- a lowered stamp
# The agent's own tests take a file this library made (at head), lower schema_version by hand,
# close and reopen: every step above the stamp runs and the stamp is raised again.


def _lower_stamp(path: Path, version: int) -> None:
    engine_mod.dispose_all()
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE schema_version SET version = ?", (version,))
    con.close()


def test_a_stamp_lowered_to_15_on_a_store_at_head_tags_delegates(store_path: Path) -> None:
    with SessionDB(store_path) as db:
        db.create_session("parent", "cli")
        db.create_session("sub", "cli", parent_session_id="parent")
        db.create_session("orphan", "cli")
        db.append_message("orphan", "tool", "output of a subagent", tool_name="terminal")
        db.create_session("kept", "cli")
    _lower_stamp(store_path, 15)
    with SessionDB(store_path) as db:
        assert _configs(store_path)["sub"] == {"_delegate_from": "parent"}
        assert _configs(store_path)["orphan"] == {"_delegate_from": "__orphaned__"}
        assert {s["id"] for s in db.list_sessions_rich()} == {"parent", "kept"}
        assert db.delete_session("parent") is True
        assert db.get_session("sub") is None  # a delegate goes with its parent
    assert _one(store_path, "SELECT MAX(version) FROM schema_version") == (21,)


def test_a_stamp_lowered_to_16_on_a_store_at_head_seeds_usage_once(store_path: Path) -> None:
    with SessionDB(store_path) as db:
        db.create_session("u1", "cli", model="gpt-x")
    _lower_stamp(store_path, 16)
    con = sqlite3.connect(store_path)
    with con:  # counters an agent of the v16 line wrote, without per-model rows
        con.execute("UPDATE sessions SET input_tokens = 100, output_tokens = 20, "
                    "billing_provider = 'openai' WHERE id = 'u1'")
    con.close()
    SessionDB(store_path).close()
    assert [row[:3] + row[6:8] for row in _usage(store_path)] == [
        ("u1", "gpt-x", "openai", 100, 20)]
    engine_mod.dispose_all()
    SessionDB(store_path).close()
    assert len(_usage(store_path)) == 1
    assert _one(store_path, "SELECT MAX(version) FROM schema_version") == (21,)


def test_a_stamp_lowered_to_17_on_a_store_at_head_fills_gateway_columns(
        store_path: Path) -> None:
    with SessionDB(store_path) as db:
        db.create_session("g1", "telegram")
    _lower_stamp(store_path, 17)
    # The gateway's index lives in the agent's home ($HERMES_HOME), not beside this file.
    _gateway_index(Path(os.environ["HERMES_HOME"]), GATEWAY_INDEX)
    with SessionDB(store_path) as db:
        g1 = db.get_session("g1")
    assert (g1["display_name"], g1["expiry_finalized"]) == ("Ann", 1)
    assert json.loads(g1["origin_json"]) == GATEWAY_INDEX["agent:telegram:dm:42"]["origin"]
    assert _one(store_path, "SELECT MAX(version) FROM schema_version") == (21,)
