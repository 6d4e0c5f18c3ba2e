"""import_sessions (the v21 API): exported dicts restored as history, validated before any
write, one unit, existing ids skipped, parents attached last."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backends import sql
from sqlalchemy import func, select, update

from hermes_store import SessionDB
from hermes_store.db.models import ChatSession, Message
from hermes_store.repo import bigrams

SESSIONS, MESSAGES = ChatSession.__table__, Message.__table__
MIB = 1024 * 1024


def counts(store: SessionDB) -> tuple[int, int]:
    with store.engine.connect() as conn:
        return (conn.execute(select(func.count()).select_from(SESSIONS)).scalar_one(),
                conn.execute(select(func.count()).select_from(MESSAGES)).scalar_one())


def message_rows(store: SessionDB, sid: str) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(MESSAGES).where(MESSAGES.c.session_id == sid).order_by(MESSAGES.c.id)
        ).mappings()]


def set_columns(store: SessionDB, sid: str, **values: Any) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(SESSIONS).where(SESSIONS.c.id == sid).values(**values))


def entry(sid: str, *msgs: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"id": sid, "source": "cli", "started_at": 1_700_000_000.0, "messages": list(msgs),
            **fields}


def ok(result: dict[str, Any]) -> dict[str, Any]:
    assert result["ok"] is True, result
    assert result["errors"] == []
    return result


@pytest.fixture
def other(tmp_path: Path) -> Callable[[], SessionDB]:
    """Another fresh store (the source of an export)."""
    opened: list[SessionDB] = []

    def make() -> SessionDB:
        store = SessionDB(tmp_path / f"other-{len(opened)}.db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# --------------------------------------------------------------------------- round trip

HISTORY = {"model": "gpt-x", "system_prompt": "be brief", "user_id": "u1",
           "end_reason": "user_exit", "cwd": "/repo", "git_branch": "main",
           "git_repo_root": "/repo", "billing_provider": "openrouter",
           "billing_base_url": "https://o.example", "billing_mode": "api",
           "cost_status": "estimated", "cost_source": "table", "pricing_version": "v3"}
RUNTIME = {"session_key": "agent:main:telegram:dm:1", "chat_id": "1", "chat_type": "dm",
           "thread_id": "4", "display_name": "Ana", "origin_json": '{"platform": "telegram"}',
           "expiry_finalized": 1, "handoff_state": "pending", "handoff_platform": "telegram",
           "handoff_error": "x", "compression_failure_cooldown_until": 1.0,
           "compression_failure_error": "boom", "compression_fallback_streak": 3,
           "rewind_count": 2, "pinned": 1}


def source_store(store: SessionDB) -> None:
    store.create_session("s1", "telegram", model_config={"temperature": 0.2}, **{
        k: HISTORY[k] for k in ("model", "system_prompt", "user_id", "cwd", "git_branch",
                                "git_repo_root", "billing_provider", "billing_base_url",
                                "billing_mode")})
    store.append_message("s1", "user", "hello", timestamp=1_700_000_001.0)
    store.append_message("s1", "assistant", "calling", tool_calls=[{"id": "c1"}, {"id": "c2"}],
                         reasoning="because", reasoning_details=[{"type": "summary"}],
                         finish_reason="tool_calls", timestamp=1_700_000_002.0)
    store.append_message("s1", "tool", "result", tool_call_id="c1", tool_name="read",
                         timestamp=1_700_000_003.0)
    store.append_message("s1", "user", [{"type": "text", "text": "look"}],
                         timestamp=1_700_000_004.0)
    store.update_token_counts("s1", input_tokens=10, output_tokens=20, cache_read_tokens=3,
                              cache_write_tokens=4, reasoning_tokens=5, estimated_cost_usd=0.5,
                              actual_cost_usd=0.4, cost_status="estimated",
                              cost_source="table", pricing_version="v3", api_call_count=2)
    store.set_session_title("s1", "Round trip")
    store.end_session("s1", "user_exit")
    set_columns(store, "s1", started_at=1_700_000_000.0, archived=1, **RUNTIME)


def test_an_export_comes_back_as_the_same_history(db: SessionDB,
                                                  other: Callable[[], SessionDB]) -> None:
    source = other()
    source_store(source)
    exported = source.export_session("s1")
    result = ok(db.import_sessions([exported]))
    assert result == {"ok": True, "imported": 1, "skipped": 0, "detached": 0,
                      "imported_ids": ["s1"], "skipped_ids": [], "errors": []}
    row, was = db.get_session("s1"), source.get_session("s1")
    kept = ["source", "started_at", "ended_at", "end_reason", "title", "model", "model_config",
            "system_prompt", "user_id", "input_tokens", "output_tokens", "cache_read_tokens",
            "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd",
            "api_call_count", "cwd", "git_branch", "git_repo_root", "billing_provider",
            "billing_base_url", "billing_mode", "cost_status", "cost_source",
            "pricing_version", "archived", "message_count", "tool_call_count"]
    assert {k: row[k] for k in kept} == {k: was[k] for k in kept}
    assert (row["message_count"], row["tool_call_count"]) == (4, 2)
    assert json.loads(row["model_config"]) == {"temperature": 0.2}

    def strip(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in m.items() if k != "id"} for m in msgs]

    assert strip(db.get_messages("s1")) == strip(source.get_messages("s1"))


def test_runtime_state_starts_fresh(db: SessionDB, other: Callable[[], SessionDB]) -> None:
    source = other()
    source_store(source)
    ok(db.import_sessions([source.export_session("s1")]))
    row = db.get_session("s1")
    assert {k: row[k] for k in RUNTIME} == {
        "session_key": None, "chat_id": None, "chat_type": None, "thread_id": None,
        "display_name": None, "origin_json": None, "expiry_finalized": 0,
        "handoff_state": None, "handoff_platform": None, "handoff_error": None,
        "compression_failure_cooldown_until": None, "compression_failure_error": None,
        "compression_fallback_streak": 0, "rewind_count": 0, "pinned": 0}


def test_the_v21_fixture_exports_into_a_fresh_store_and_skips_on_the_way_back(
        db: SessionDB, legacy_db: Callable[[int], Path]) -> None:
    with SessionDB(legacy_db(21)) as fixture:
        exported = fixture.export_all()
        before = counts(fixture)
        assert 0 < len(exported) <= 500
        ok(db.import_sessions(exported))
        for item in exported:
            got = db.export_session(item["id"])
            assert got is not None
            assert [(m["role"], m["content"], m["tool_calls"]) for m in got["messages"]] == [
                (m["role"], m["content"], m["tool_calls"]) for m in item["messages"]]
            assert got["message_count"] == len(item["messages"])
        back = ok(fixture.import_sessions(db.export_all()))
        assert (back["imported"], back["skipped"]) == (0, len(exported))
        assert counts(fixture) == before
    assert counts(db) == before


# --------------------------------------------------------------------------- sessions


def test_existing_ids_are_skipped_and_left_untouched(db: SessionDB) -> None:
    db.create_session("old", "cli", model="kept")
    result = ok(db.import_sessions([entry("new", {"role": "user", "content": "hi"}),
                                    entry("old", {"role": "user", "content": "ignored"},
                                          model="other")]))
    assert (result["imported"], result["skipped"]) == (1, 1)
    assert (result["imported_ids"], result["skipped_ids"]) == (["new"], ["old"])
    assert db.get_session("old")["model"] == "kept"
    assert db.get_messages("old") == []
    assert db.message_count("new") == 1


def test_ids_are_stripped_and_a_blank_source_becomes_import(db: SessionDB) -> None:
    ok(db.import_sessions([entry("  padded  ", source="  "), {"id": "bare"}]))
    assert db.get_session("padded")["source"] == "import"
    assert db.get_session("bare")["source"] == "import"


def test_start_times_are_parsed_and_unparsable_ones_become_now(db: SessionDB) -> None:
    before = time.time()
    ok(db.import_sessions([entry("iso", started_at="2023-11-14T22:13:20Z"),
                           entry("naive", started_at="2023-11-14T22:13:20"),
                           entry("text", started_at="1700000000.5"),
                           entry("junk", started_at="last tuesday"),
                           entry("none", started_at=None)]))
    assert db.get_session("iso")["started_at"] == 1_700_000_000.0
    assert db.get_session("naive")["started_at"] == 1_700_000_000.0
    assert db.get_session("text")["started_at"] == 1_700_000_000.5
    for sid in ("junk", "none"):
        assert before <= db.get_session(sid)["started_at"] <= time.time()


# --------------------------------------------------------------------------- messages


def test_messages_go_in_as_replace_messages_would_store_them(db: SessionDB) -> None:
    ok(db.import_sessions([entry(
        "s",
        {"role": "user", "content": "q", "reasoning": "dropped", "platform_message_id": "p1",
         "observed": True},
        {"role": "assistant", "content": None, "tool_calls": '[{"id": "c1"}]',
         "reasoning": "why", "reasoning_content": "", "reasoning_details": '[{"a": 1}]',
         "codex_reasoning_items": "not json", "codex_message_items": [{"b": 2}],
         "message_id": "m2", "effect_disposition": "applied", "token_count": 7},
        {"role": "tool", "content": "r", "tool_call_id": "c1", "tool_name": "read",
         "tool_calls": [{"id": "ignored"}], "platform_message_id": "p3", "message_id": "m3"},
    )]))
    rows = message_rows(db, "s")
    assert [(r["role"], r["active"], r["compacted"]) for r in rows] == [
        ("user", 1, 0), ("assistant", 1, 0), ("tool", 1, 0)]
    user, assistant, tool = rows
    assert (user["reasoning"], user["platform_message_id"], user["observed"]) == (None, "p1", 1)
    assert json.loads(assistant["tool_calls"]) == [{"id": "c1"}]
    assert (assistant["reasoning"], assistant["reasoning_content"]) == ("why", "")
    assert json.loads(assistant["reasoning_details"]) == [{"a": 1}]
    assert json.loads(assistant["codex_reasoning_items"]) == "not json"
    assert json.loads(assistant["codex_message_items"]) == [{"b": 2}]
    assert (assistant["platform_message_id"], assistant["effect_disposition"],
            assistant["observed"], assistant["token_count"]) == ("m2", "applied", 0, 7)
    assert (tool["platform_message_id"], tool["tool_name"]) == ("p3", "read")
    session = db.get_session("s")
    assert (session["message_count"], session["tool_call_count"]) == (3, 1)


def test_missing_timestamps_come_from_a_clock_that_never_goes_back(db: SessionDB) -> None:
    before = time.time()
    ok(db.import_sessions([entry("s", {"role": "user", "content": "a"},
                                 {"role": "user", "content": "b", "timestamp": 1_000.0},
                                 {"role": "user", "content": "c"},
                                 {"role": "user", "content": "d", "timestamp": 2e9},
                                 {"role": "user", "content": "e"})]))
    stamps = [m["timestamp"] for m in db.get_messages("s")]
    assert before <= stamps[0] <= time.time()
    assert stamps[1] == 1_000.0
    assert stamps[2] == pytest.approx(stamps[0] + 2e-6, rel=0, abs=5e-7)
    assert stamps[3] == 2e9
    assert stamps[4] == pytest.approx(2e9 + 1e-6, rel=0, abs=5e-7)
    assert stamps[4] > stamps[3]


@pytest.mark.sqlite_only  # FTS5 and its CJK side table; PostgreSQL search is its own slice
def test_imported_messages_are_searchable_at_once_cjk_included(db: SessionDB) -> None:
    ok(db.import_sessions([entry("s", {"role": "user", "content": "deploy the 東京 cluster"},
                                 *[{"role": "assistant", "content": f"step {n}"}
                                   for n in range(600)])]))
    for query in ("deploy", "東京", "step"):
        hits = db.search_messages(query, limit=1)
        assert [h["session_id"] for h in hits] == ["s"], query
    with db.engine.connect() as conn:
        assert bigrams.has_index(conn) and bigrams.pending_count(conn) == 0


# --------------------------------------------------------------------------- parents


def test_parents_attach_after_every_insert_whatever_the_order(db: SessionDB) -> None:
    db.create_session("stored", "cli")
    result = ok(db.import_sessions([entry("child", parent_session_id="parent"),
                                    entry("parent", parent_session_id="stored"),
                                    entry("orphan", parent_session_id="nowhere"),
                                    entry("blank", parent_session_id="  ")]))
    assert result["detached"] == 1
    assert db.get_session("child")["parent_session_id"] == "parent"
    assert db.get_session("parent")["parent_session_id"] == "stored"
    assert db.get_session("orphan")["parent_session_id"] is None
    assert db.get_session("blank")["parent_session_id"] is None


def test_a_cycle_loses_the_link_of_its_first_session_in_import_order(db: SessionDB) -> None:
    result = ok(db.import_sessions([entry("a", parent_session_id="b"),
                                    entry("b", parent_session_id="c"),
                                    entry("c", parent_session_id="a"),
                                    entry("self", parent_session_id="self")]))
    assert result["detached"] == 2
    parents = {sid: db.get_session(sid)["parent_session_id"] for sid in ("a", "b", "c", "self")}
    assert parents == {"a": None, "b": "c", "c": "a", "self": None}


def test_two_sessions_naming_each_other_import_as_one_walkable_lineage(db: SessionDB) -> None:
    result = ok(db.import_sessions([
        entry("a", parent_session_id="b", ended_at=1_700_000_100.0, end_reason="compression"),
        entry("b", parent_session_id="a", started_at=1_700_000_200.0)]))
    assert (result["imported"], result["detached"]) == (2, 1)
    assert db.get_session("a")["parent_session_id"] is None
    assert db.get_session("b")["parent_session_id"] == "a"
    assert db.get_compression_lineage("a") == ["a", "b"]
    assert db.get_compression_lineage("b") == ["a", "b"]
    assert db.get_compression_tip("a") == "b"


def test_a_cycle_entered_from_outside_keeps_the_entering_link(db: SessionDB) -> None:
    result = ok(db.import_sessions([entry("x", parent_session_id="a"),
                                    entry("a", parent_session_id="b"),
                                    entry("b", parent_session_id="a")]))
    assert result["detached"] == 1
    parents = {sid: db.get_session(sid)["parent_session_id"] for sid in ("x", "a", "b")}
    assert parents == {"x": "a", "a": None, "b": "a"}


def test_a_skipped_session_counts_as_a_parent_in_the_store(db: SessionDB) -> None:
    db.create_session("p", "cli")
    result = ok(db.import_sessions([entry("p"), entry("kid", parent_session_id="p")]))
    assert (result["skipped"], result["detached"]) == (1, 0)
    assert db.get_session("kid")["parent_session_id"] == "p"


# --------------------------------------------------------------------------- validation


def test_the_payload_must_be_a_list_of_at_most_the_session_cap(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.import_sessions({"id": "x"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        db.import_sessions([{"id": f"s{i}"} for i in range(501)])
    assert counts(db) == (0, 0)
    assert ok(db.import_sessions([{"id": f"s{i}"} for i in range(500)]))["imported"] == 500
    db._IMPORT_MAX_SESSIONS = 2  # type: ignore[misc]
    with pytest.raises(ValueError):
        db.import_sessions([{"id": "a"}, {"id": "b"}, {"id": "c"}])
    assert counts(db) == (500, 0)
    assert ok(db.import_sessions([{"id": "a"}, {"id": "b"}]))["imported"] == 2


class Unserialisable:
    """An object the JSON encoder refuses."""


M = {"role": "user", "content": "x"}
CASES: list[tuple[str, Any, str]] = [
    ("not an object", ["x"], "session must be an object"),
    ("no id", {"messages": []}, "session id is required"),
    ("blank id", {"id": " \t"}, "session id is required"),
    ("non-str id", {"id": 5}, "session id is required"),
    ("messages not a list", {"id": "s", "messages": {"role": "user"}},
     "messages must be a list"),
    ("messages null", {"id": "s", "messages": None}, "messages must be a list"),
    ("message not an object", {"id": "s", "messages": [M, "hi"]},
     "messages must contain only objects"),
    ("unserialisable", {"id": "s", "extra": Unserialisable()},
     "session must be JSON serializable"),
    ("lone surrogate", {"id": "s", "title": "bad \ud800"}, "session must be JSON serializable"),
    ("config not JSON", {"id": "s", "model_config": "{nope"}, "model_config must be valid JSON"),
    ("config JSON list", {"id": "s", "model_config": "[1]"},
     "model_config must be a JSON object"),
    ("config a list", {"id": "s", "model_config": [1]}, "model_config must be a JSON object"),
    *[(f"session {name}", {"id": "s", name: 3}, f"{name} must be a string")
      for name in ("source", "user_id", "model", "system_prompt", "end_reason", "cwd",
                   "git_branch", "git_repo_root", "billing_provider", "billing_base_url",
                   "billing_mode", "cost_status", "cost_source", "pricing_version", "title",
                   "parent_session_id")],
    *[(f"message {name}", {"id": "s", "messages": [M, {**M, name: 1}]},
       f"messages[1].{name} must be a string")
      for name in ("tool_call_id", "tool_name", "effect_disposition", "finish_reason",
                   "reasoning", "reasoning_content", "platform_message_id", "message_id")],
    ("no role", {"id": "s", "messages": [{"content": "x"}]},
     "messages[0].role must be a non-empty string"),
    ("empty role", {"id": "s", "messages": [M, M, {"role": ""}]},
     "messages[2].role must be a non-empty string"),
    ("token_count text", {"id": "s", "messages": [{**M, "token_count": "3"}]},
     "messages[0].token_count must be an integer"),
    ("token_count bool", {"id": "s", "messages": [{**M, "token_count": True}]},
     "messages[0].token_count must be an integer"),
]


@pytest.mark.parametrize(("payload", "error"), [(p, e) for _, p, e in CASES],
                         ids=[name for name, _, _ in CASES])
def test_each_validation_error_has_its_exact_text_and_nothing_is_written(
        db: SessionDB, payload: Any, error: str) -> None:
    good = entry("good", {"role": "user", "content": "fine"})
    bad = payload[0] if isinstance(payload, list) else payload
    result = db.import_sessions([good, bad])
    expected: dict[str, Any] = {"index": 1, "error": error}
    if isinstance(bad, dict) and isinstance(bad.get("id"), str) and bad["id"].strip():
        expected["session_id"] = bad["id"].strip()
    assert result == {"ok": False, "imported": 0, "skipped": 0, "detached": 0,
                      "errors": [expected]}
    assert counts(db) == (0, 0)


def test_a_duplicate_id_in_the_payload_is_reported_at_its_second_place(db: SessionDB) -> None:
    result = db.import_sessions([{"id": "a"}, {"id": "b"}, {"id": " a "}])
    assert result["errors"] == [{"index": 2, "session_id": "a", "error": "duplicate session id"}]


def test_every_bad_entry_is_reported_once_in_payload_order(db: SessionDB) -> None:
    result = db.import_sessions([{"id": "ok"}, 7, {"id": "s", "model": 1, "cwd": 2},
                                 {"id": ""}])
    assert result["errors"] == [
        {"index": 1, "error": "session must be an object"},
        {"index": 2, "session_id": "s", "error": "model must be a string"},
        {"index": 3, "error": "session id is required"}]


def test_model_config_may_be_an_object_or_its_json_text(db: SessionDB) -> None:
    ok(db.import_sessions([{"id": "obj", "model_config": {"a": "é"}},
                           {"id": "txt", "model_config": '{"b": 1}'},
                           {"id": "none", "model_config": None}]))
    assert json.loads(db.get_session("obj")["model_config"]) == {"a": "é"}
    assert db.get_session("txt")["model_config"] == '{"b": 1}'
    assert db.get_session("none")["model_config"] is None


def test_numbers_that_cannot_be_stored_as_numbers_are_refused(db: SessionDB) -> None:
    result = db.import_sessions([{"id": "a", "input_tokens": "12"},
                                 {"id": "b", "estimated_cost_usd": "cheap"},
                                 {"id": "c", "ended_at": "yesterday-ish"},
                                 {"id": "d", "api_call_count": 2.0, "actual_cost_usd": 1}])
    assert result["errors"] == [
        {"index": 0, "session_id": "a", "error": "input_tokens must be an integer"},
        {"index": 1, "session_id": "b", "error": "estimated_cost_usd must be a number"},
        {"index": 2, "session_id": "c", "error": "ended_at must be a time"}]
    ok(db.import_sessions([{"id": "d", "api_call_count": 2.0, "actual_cost_usd": 1}]))
    assert db.get_session("d")["api_call_count"] == 2


def test_a_message_the_append_path_refuses_is_reported_with_its_place(db: SessionDB) -> None:
    result = db.import_sessions([{"id": "s", "messages": [M, {"role": "user", "content": 5}]}])
    assert result["errors"] == [{"index": 0, "session_id": "s",
                                 "error": "messages[1]: content must be str, list, dict or "
                                          "None, not int"}]


def test_a_title_held_by_another_session_rejects_the_batch(db: SessionDB) -> None:
    db.create_session("mine", "cli")
    db.set_session_title("mine", "Taken")
    result = db.import_sessions([{"id": "x"}, {"id": "y", "title": "Taken"},
                                 {"id": "z", "title": "Free"}, {"id": "w", "title": "Free"}])
    assert result == {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": [
        {"index": 1, "session_id": "y", "error": "title already in use by another session"},
        {"index": 3, "session_id": "w", "error": "title already in use by another session"}]}
    assert counts(db) == (1, 0)


# --------------------------------------------------------------------------- caps


def big(sid: str, kib: int) -> dict[str, Any]:
    return {"id": sid, "messages": [{"role": "user", "content": "x" * 1024 * kib}]}


def test_the_per_session_caps(db: SessionDB) -> None:
    assert db.import_sessions([{"id": "s", "messages": [M] * 10_001}])["errors"] == [
        {"index": 0, "session_id": "s",
         "error": "messages exceeds the per-session import limit"}]
    assert db.import_sessions([big("s", 5 * 1024)])["errors"] == [
        {"index": 0, "session_id": "s", "error": "session exceeds the import size limit"}]
    assert counts(db) == (0, 0)


def test_the_total_caps(db: SessionDB) -> None:
    six = [big(f"s{i}", 4 * 1024 + 1000) for i in range(6)]
    assert db.import_sessions(six)["errors"] == [
        {"index": 5, "session_id": "s5", "error": "import exceeds the total size limit"}]
    many = [{"id": f"m{i}", "messages": [M] * 10_000} for i in range(6)]
    assert db.import_sessions(many)["errors"] == [
        {"index": 5, "session_id": "m5", "error": "messages exceeds the total import limit"}]
    assert counts(db) == (0, 0)


def test_caps_can_be_lowered_on_one_instance(db: SessionDB) -> None:
    db._IMPORT_MAX_MESSAGES_PER_SESSION = 1  # type: ignore[misc]
    db._IMPORT_MAX_TOTAL_MESSAGES = 1  # type: ignore[misc]
    db._IMPORT_MAX_SESSION_BYTES = 200  # type: ignore[misc]
    db._IMPORT_MAX_TOTAL_BYTES = 300  # type: ignore[misc]
    result = db.import_sessions([{"id": "a", "messages": [M, M]},
                                 {"id": "b", "messages": [M]},
                                 {"id": "c", "title": "t" * 300},
                                 {"id": "d", "title": "t" * 90},
                                 {"id": "e", "messages": [M]},
                                 {"id": "f", "title": "t" * 150}])
    assert [(e["session_id"], e["error"]) for e in result["errors"]] == [
        ("a", "messages exceeds the per-session import limit"),
        ("c", "session exceeds the import size limit"),
        ("e", "messages exceeds the total import limit"),
        ("f", "import exceeds the total size limit")]
    assert SessionDB._IMPORT_MAX_TOTAL_BYTES == 25 * MIB
    assert (SessionDB._IMPORT_MAX_SESSIONS, SessionDB._IMPORT_MAX_MESSAGES_PER_SESSION,
            SessionDB._IMPORT_MAX_TOTAL_MESSAGES, SessionDB._IMPORT_MAX_SESSION_BYTES) == (
        500, 10_000, 50_000, 5 * MIB)


# --------------------------------------------------------------------------- one unit


@pytest.mark.sqlite_only
def test_a_failure_during_the_write_leaves_the_sqlite_store_as_it_was(db: SessionDB) -> None:
    db.create_session("kept", "cli")
    db._conn.execute("CREATE TRIGGER refuse AFTER INSERT ON messages "
                     "WHEN NEW.content = 'poison' BEGIN SELECT RAISE(ABORT, 'refused'); END")
    payload = [entry("a", {"role": "user", "content": "fine"}),
               entry("b", {"role": "user", "content": "poison"}, parent_session_id="a")]
    with pytest.raises(sqlite3.DatabaseError, match="refused"):
        db.import_sessions(payload)
    assert counts(db) == (1, 0)
    assert db.get_session("a") is None


def test_a_failure_during_the_write_leaves_the_server_store_as_it_was(pg_store: str) -> None:
    import psycopg  # pg_store has it: the postgres extra

    refuse = ("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
              "IF NEW.content = 'poison' THEN RAISE EXCEPTION 'refused'; END IF; "
              "RETURN NEW; END $$")
    with SessionDB(pg_store) as db:
        sql(db, refuse)
        sql(db, "CREATE TRIGGER refuse AFTER INSERT ON messages "
                "FOR EACH ROW EXECUTE FUNCTION refuse()")
        db.create_session("kept", "cli")
        payload = [entry("a", {"role": "user", "content": "fine"}),
                   entry("b", {"role": "user", "content": "poison"}, parent_session_id="a")]
        with pytest.raises(psycopg.errors.RaiseException, match="refused"):
            db.import_sessions(payload)
        assert counts(db) == (1, 0)
        assert db.get_session("a") is None
