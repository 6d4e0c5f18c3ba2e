"""Import into a store (docs/formats.md#import): our jsonl, Claude Code and Codex logs; idempotent
re-import, append-only growth, malformed lines counted, one failure isolated per line or file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from hermes_store.db.engine import open_engine, reading
from hermes_store.db.models import ChatSession, Message
from hermes_store.errors import StoreFullError
from hermes_store.transfer import load
from hermes_store.transfer.builder import native_session_id
from hermes_store.transfer.export import ExportOptions, export_sessions
from hermes_store.transfer.load import ImportResult, import_paths

S, M = ChatSession.__table__, Message.__table__
CLAUDE_ID = "f6019a3e-2b1c-4d5e-8f70-112233445566"
CODEX_ID = "019dabc6-8fef-7681-a054-b5bb75fcb97d"


def write_lines(path: Path, lines: list[Any], mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def _claude(kind: str, ts: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": f"u-{ts}", "parentUuid": None, "sessionId": CLAUDE_ID,
            "cwd": "/home/ana/app", "gitBranch": "main", "version": "2.0.33", "timestamp": ts,
            "isSidechain": False, "userType": "external", "message": message, **extra}


def claude_lines(first: int = 0, n: int = 2) -> list[dict[str, Any]]:
    """*n* exchanges: a prompt, an assistant tool call, its result, and a reply."""
    out = []
    for i in range(first, first + n):
        ts = f"2025-11-19T21:{20 + i:02d}:"
        out += [
            _claude("user", ts + "00.000Z", {"role": "user", "content": f"question {i}"}),
            _claude("assistant", ts + "05.000Z", {
                "id": f"msg_{i}a", "model": "claude-sonnet-4", "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                             "input": {"command": f"ls {i}"}}],
                "usage": {"input_tokens": 10, "output_tokens": 5}}),
            _claude("user", ts + "10.000Z", {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"out {i}",
                 "is_error": False}]}),
            _claude("assistant", ts + "15.000Z", {
                "id": f"msg_{i}b", "model": "claude-sonnet-4", "role": "assistant",
                "content": [{"type": "text", "text": f"answer {i}"}],
                "usage": {"input_tokens": 10, "output_tokens": 5}}),
        ]
    return out


def _codex(kind: str, ts: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": ts, "type": kind, "payload": payload}


def codex_lines() -> list[dict[str, Any]]:
    return [
        _codex("session_meta", "2026-06-01T10:00:00.000Z", {
            "id": CODEX_ID, "timestamp": "2026-06-01T10:00:00.000Z", "cwd": "/home/ana/app",
            "originator": "codex_cli_rs", "cli_version": "0.125.0", "source": "cli",
            "model_provider": "openai", "base_instructions": {"text": "You are Codex."},
            "git": {"branch": "main"}}),
        _codex("turn_context", "2026-06-01T10:00:01.000Z", {"turn_id": "t1", "model": "gpt-5.5"}),
        _codex("response_item", "2026-06-01T10:00:02.000Z", {
            "type": "message", "role": "user", "content": [{
                "type": "input_text",
                "text": "# AGENTS.md instructions for /home/ana/app\n<INSTRUCTIONS>be terse</INSTRUCTIONS>"}]}),
        _codex("response_item", "2026-06-01T10:00:03.000Z", {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug"}]}),
        _codex("response_item", "2026-06-01T10:00:04.000Z", {
            "type": "function_call", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}",
            "call_id": "call_1"}),
        _codex("response_item", "2026-06-01T10:00:05.000Z", {
            "type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"}),
        _codex("response_item", "2026-06-01T10:00:06.000Z", {
            "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}),
        _codex("event_msg", "2026-06-01T10:00:07.000Z", {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": 100, "output_tokens": 10}}}),
    ]


def _counts(path: Path) -> tuple[int, int]:
    with reading(open_engine(path)) as conn:
        return (conn.scalar(select(func.count()).select_from(S)),
                conn.scalar(select(func.count()).select_from(M)))


def _session(path: Path, sid: str) -> dict[str, Any]:
    with reading(open_engine(path)) as conn:
        return dict(conn.execute(select(S).where(S.c.id == sid)).mappings().one())


def _messages(path: Path, sid: str) -> list[dict[str, Any]]:
    with reading(open_engine(path)) as conn:
        return [dict(r) for r in conn.execute(select(M).where(M.c.session_id == sid)
                                              .order_by(M.c.id)).mappings()]


def _import(db: Path, *paths: Path, **kw: Any) -> ImportResult:
    return import_paths(open_engine(db), list(paths), **kw)


# --------------------------------------------------------------------------- claude

def test_claude_log_becomes_a_structured_session_with_provenance(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", claude_lines())
    result = _import(head_db, log, kind="claude")
    (f,) = result.files
    assert (f.status, f.sessions_imported, f.messages_imported) == ("imported", 1, 8)
    sid = f.session_ids[0]
    assert sid.endswith("_" + native_session_id("claude-code", CLAUDE_ID, 0)[-8:])
    row = _session(head_db, sid)
    assert (row["source"], row["cwd"], row["git_branch"], row["end_reason"]) == (
        "claude-code", "/home/ana/app", "main", "imported")
    assert (row["message_count"], row["tool_call_count"]) == (8, 2)
    assert row["title"] == "question 0"
    origin = json.loads(row["origin_json"])["imported_from"]
    assert origin["tool"] == "claude-code" and origin["foreign_session_id"] == CLAUDE_ID
    assert len(origin["file_sha256"]) == 64 and origin["messages_imported"] == 8
    msgs = _messages(head_db, sid)
    assert [m["role"] for m in msgs[:4]] == ["user", "assistant", "tool", "assistant"]
    call = json.loads(msgs[1]["tool_calls"])[0]
    assert call["function"]["name"] == "Bash" and json.loads(call["function"]["arguments"]) == {"command": "ls 0"}
    assert msgs[2]["tool_call_id"] == "toolu_0" and msgs[2]["content"] == "out 0"
    assert not any("[ran tool" in (m["content"] or "") for m in msgs)
    assert msgs[0]["timestamp"] < msgs[1]["timestamp"] < msgs[2]["timestamp"]


def test_reimporting_an_unchanged_file_writes_nothing(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", claude_lines())
    _import(head_db, log, kind="claude")
    before = _counts(head_db)
    again = _import(head_db, log, kind="claude").files[0]
    assert again.status == "already_imported" and again.messages_imported == 0
    assert _counts(head_db) == before


def test_moving_the_file_does_not_duplicate(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "a" / f"{CLAUDE_ID}.jsonl", claude_lines())
    _import(head_db, log, kind="claude")
    moved = tmp_path / "b" / log.name
    moved.parent.mkdir()
    log.rename(moved)
    assert _import(head_db, moved, kind="claude").files[0].status == "already_imported"
    assert _counts(head_db) == (1, 8)


def test_an_appended_file_adds_only_the_new_messages(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", claude_lines(0, 2))
    sid = _import(head_db, log, kind="claude").files[0].session_ids[0]
    first_ids = [m["id"] for m in _messages(head_db, sid)]
    write_lines(log, claude_lines(2, 1), mode="a")
    f = _import(head_db, log, kind="claude").files[0]
    assert (f.status, f.messages_imported) == ("appended", 4)
    msgs = _messages(head_db, sid)
    assert [m["id"] for m in msgs[:8]] == first_ids
    assert [m["content"] for m in msgs[8:]] == ["question 2", None, "out 2", "answer 2"]
    row = _session(head_db, sid)
    assert (row["message_count"], row["tool_call_count"]) == (12, 3)
    assert json.loads(row["origin_json"])["imported_from"]["messages_imported"] == 12
    assert _import(head_db, log, kind="claude").files[0].status == "already_imported"


def test_an_assistant_message_streamed_across_the_append_boundary_is_completed(
        head_db: Path, tmp_path: Path) -> None:
    lines = claude_lines(0, 1)
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", lines)
    sid = _import(head_db, log, kind="claude").files[0].session_ids[0]
    # The same API message (msg_0b) continues with a tool call on the next line.
    write_lines(log, [_claude("assistant", "2025-11-19T21:20:16.000Z", {
        "id": "msg_0b", "model": "claude-sonnet-4", "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_x", "name": "Read", "input": {"path": "a"}}],
        "usage": {"input_tokens": 10, "output_tokens": 5}})], mode="a")
    f = _import(head_db, log, kind="claude").files[0]
    assert (f.status, f.messages_imported) == ("appended", 0)
    last = _messages(head_db, sid)[-1]
    assert last["content"] == "answer 0" and json.loads(last["tool_calls"])[0]["id"] == "toolu_x"
    assert _session(head_db, sid)["tool_call_count"] == 2


def test_a_rewritten_file_is_skipped_unless_replace(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", claude_lines(0, 2))
    sid = _import(head_db, log, kind="claude").files[0].session_ids[0]
    lines = claude_lines(0, 2)
    lines[0]["message"]["content"] = "question zero, edited"
    write_lines(log, lines)
    f = _import(head_db, log, kind="claude").files[0]
    assert f.status == "skipped" and any("--replace" in n for n in f.notes)
    assert _messages(head_db, sid)[0]["content"] == "question 0"
    f = _import(head_db, log, kind="claude", replace=True).files[0]
    assert (f.status, f.messages_imported) == ("replaced", 8)
    msgs = _messages(head_db, sid)
    assert len(msgs) == 8 and msgs[0]["content"] == "question zero, edited"
    assert _session(head_db, sid)["message_count"] == 8


def test_malformed_lines_are_counted_and_skipped(head_db: Path, tmp_path: Path) -> None:
    lines: list[Any] = claude_lines()
    lines.insert(2, "{not json")
    lines.insert(5, "[1, 2")
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", lines)
    result = _import(head_db, log, kind="claude")
    assert result.malformed_lines == 2 and result.files[0].status == "imported"
    assert result.exit_code == 0 and _counts(head_db) == (1, 8)


def test_a_clashing_title_gets_a_suffix(head_db: Path, tmp_path: Path) -> None:
    other = "aaaaaaaa-2b1c-4d5e-8f70-112233445566"
    a = write_lines(tmp_path / "p" / f"{CLAUDE_ID}.jsonl", claude_lines())
    b = write_lines(tmp_path / "p" / f"{other}.jsonl",
                    [dict(line, sessionId=other) for line in claude_lines()])
    result = _import(head_db, a, b, kind="claude")
    titles = sorted(_session(head_db, f.session_ids[0])["title"] for f in result.files)
    assert titles == ["question 0", "question 0 (2)"]


def test_dry_run_reports_without_writing(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "proj" / f"{CLAUDE_ID}.jsonl", claude_lines())
    f = _import(head_db, log, kind="claude", dry_run=True).files[0]
    assert (f.status, f.messages_imported) == ("imported", 8)
    assert _counts(head_db) == (0, 0)


# --------------------------------------------------------------------------- codex

def test_codex_rollout_imports_structured_and_drops_the_agents_md_preamble(
        head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / ".codex" / "sessions" / "2026" / "06" / "01"
                      / f"rollout-2026-06-01T10-00-00-{CODEX_ID}.jsonl", codex_lines())
    f = _import(head_db, log).files[0]
    assert (f.format, f.status, f.dropped_wrappers) == ("codex", "imported", 1)
    row = _session(head_db, f.session_ids[0])
    assert (row["source"], row["model"], row["system_prompt"]) == ("codex-cli", "gpt-5.5", "You are Codex.")
    assert (row["input_tokens"], row["output_tokens"]) == (100, 10)
    msgs = _messages(head_db, f.session_ids[0])
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[0]["content"] == "Fix the bug"
    assert msgs[2]["tool_call_id"] == "call_1" and msgs[2]["tool_name"] == "exec_command"
    assert row["message_count"] == 4 and row["tool_call_count"] == 1
    assert _import(head_db, log).files[0].status == "already_imported"


# --------------------------------------------------------------------------- jsonl

def _export_all(db: Path, out: Path) -> None:
    with reading(open_engine(db)) as conn:
        export_sessions(conn, out, None, ExportOptions())


def test_jsonl_existing_ids_are_skipped_and_counted_unless_replace(head_db: Path, tmp_path: Path) -> None:
    log = write_lines(tmp_path / "p" / f"{CLAUDE_ID}.jsonl", claude_lines())
    _import(head_db, log, kind="claude")
    backup = tmp_path / "backup.jsonl"
    _export_all(head_db, backup)
    f = _import(head_db, backup).files[0]
    assert (f.format, f.status, f.sessions_skipped, f.sessions_imported) == ("jsonl", "skipped", 1, 0)
    f = _import(head_db, backup, replace=True).files[0]
    assert (f.sessions_imported, f.messages_imported) == (1, 8)
    assert _counts(head_db) == (1, 8)


def _record(sid: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "source": "cli", "started_at": 1_780_000_000.0, "parent_session_id": parent,
            "message_count": 1, "messages": [{"id": 7, "role": "user", "content": f"hi from {sid}",
                                              "timestamp": 1_780_000_001.0}], **extra}


def test_jsonl_lines_fail_alone_and_parents_are_linked_or_detached(head_db: Path, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [
        _record("child", parent="root"),           # parent appears later in the file
        _record("root"),
        "{broken",
        _record("orphan", parent="missing"),
        _record("loop_a", parent="loop_b"),
        _record("loop_b", parent="loop_a"),
        {"id": "bad", "source": "cli", "started_at": 1.0, "messages": ["not an object"]},
        _record("live", session_key="agent:main:telegram:dm:1", bogus_column=1),
    ])
    f = _import(head_db, path).files[0]
    assert f.malformed_lines == 1 and f.sessions_failed == 1
    assert f.sessions_imported == 6 and f.status == "imported"
    assert _session(head_db, "child")["parent_session_id"] == "root"
    assert _session(head_db, "orphan")["parent_session_id"] is None
    loops = {_session(head_db, s)["parent_session_id"] for s in ("loop_a", "loop_b")}
    assert None in loops
    assert f.parents_detached == 2
    assert any("bogus_column" in n for n in f.notes)
    # Message ids are kept when free and fresh (in order) when they collide.
    ids = [_messages(head_db, s)[0]["id"] for s in ("child", "root")]
    assert ids[0] == 7 and ids[1] > 7
    assert _import(head_db, path).exit_code == 8  # the bad line fails again


def test_a_file_that_fits_no_format_fails_alone(head_db: Path, tmp_path: Path) -> None:
    junk = write_lines(tmp_path / "junk.jsonl", [{"hello": "world"}])
    good = write_lines(tmp_path / "p" / f"{CLAUDE_ID}.jsonl", claude_lines())
    result = _import(head_db, junk, good)
    assert [f.status for f in result.files] == ["failed", "imported"]
    assert "--from" in (result.files[0].error or "") and result.exit_code == 8


def test_empty_file_is_skipped_with_a_note(head_db: Path, tmp_path: Path) -> None:
    empty = tmp_path / "p" / f"{CLAUDE_ID}.jsonl"
    empty.parent.mkdir()
    empty.write_text("")
    f = _import(head_db, empty, kind="claude").files[0]
    assert f.status == "empty" and _counts(head_db) == (0, 0)


def test_unknown_format_name_is_a_usage_error(head_db: Path) -> None:
    with pytest.raises(ValueError):
        _import(head_db, kind="gemini")


def test_jsonl_of_the_agents_own_export_is_accepted(head_db: Path, tmp_path: Path) -> None:
    # `hermes sessions export` writes get_session() plus decoded messages, and derived keys.
    legacy = {
        "id": "20260101_000000_abcdef12", "source": "cli", "started_at": 1_780_000_000.0,
        "title": "old export", "last_active": 1_780_000_050.0, "preview": "hi",
        "messages": [
            {"id": 1, "session_id": "20260101_000000_abcdef12", "role": "user",
             "content": [{"type": "text", "text": "look"}, {"type": "image_url"}],
             "timestamp": 1_780_000_001.0},
            {"id": 2, "session_id": "20260101_000000_abcdef12", "role": "assistant",
             "content": "ok", "tool_calls": [{"id": "c1", "type": "function",
                                             "function": {"name": "t", "arguments": "{}"}}],
             "timestamp": 1_780_000_002.0},
        ],
    }
    path = write_lines(tmp_path / "agent-export.jsonl", [legacy])
    f = _import(head_db, path).files[0]
    assert (f.format, f.status, f.messages_imported) == ("jsonl", "imported", 2)
    assert any("last_active" in n and "preview" in n for n in f.notes)
    msgs = _messages(head_db, "20260101_000000_abcdef12")
    assert msgs[0]["content"].startswith("\x00json:") and json.loads(msgs[1]["tool_calls"])[0]["id"] == "c1"


def test_jsonl_counters_are_restored_as_stored_or_counted_when_missing(head_db: Path,
                                                                       tmp_path: Path) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
             {"id": "c2", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]
    path = write_lines(tmp_path / "in.jsonl", [{
        "id": "counted", "source": "cli", "started_at": 1_780_000_000.0,
        "message_count": 99, "tool_call_count": 42,
        "messages": [{"timestamp": 1_780_000_001.0, **m} for m in [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "assistant", "content": None, "tool_calls": json.dumps({"id": "c3"})},
            {"role": "tool", "content": "out", "tool_call_id": "c1", "tool_calls": calls},
        ]],
    }])
    record = json.loads(path.read_text())
    del record["message_count"], record["tool_call_count"]
    record["id"] = "uncounted"
    with path.open("a") as fh:
        fh.write(json.dumps(record) + "\n")
    assert _import(head_db, path).files[0].sessions_imported == 2
    stored = _session(head_db, "counted")
    assert (stored["message_count"], stored["tool_call_count"]) == (99, 42)
    counted = _session(head_db, "uncounted")
    assert (counted["message_count"], counted["tool_call_count"]) == (4, 3)


def test_rerunning_an_interrupted_jsonl_import_restores_parent_links(head_db: Path,
                                                                     tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [
        _record("child", parent="root"), _record("root"), _record("kept", parent="root"),
        _record("orphan", parent="missing"),
    ])
    assert _import(head_db, path).files[0].sessions_imported == 4
    # A kill after the per-record commits but before the link pass leaves every link unset.
    con = sqlite3.connect(head_db)
    with con:
        con.execute("UPDATE sessions SET parent_session_id = NULL WHERE id = 'child'")
        con.execute("UPDATE sessions SET parent_session_id = 'child' WHERE id = 'kept'")
    con.close()
    f = _import(head_db, path).files[0]
    assert (f.sessions_skipped, f.sessions_imported, f.parents_detached) == (4, 0, 1)
    assert _session(head_db, "child")["parent_session_id"] == "root"
    assert _session(head_db, "kept")["parent_session_id"] == "child"  # never overwritten
    assert _session(head_db, "orphan")["parent_session_id"] is None


@pytest.mark.parametrize("kind", ["jsonl", "claude"])
def test_a_store_failure_stops_the_import_instead_of_failing_each_file(
        head_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    def full(*_args: Any, **_kw: Any) -> Any:
        raise StoreFullError("database or disk is full")

    monkeypatch.setattr(load, "run_write", full)
    if kind == "jsonl":
        first = write_lines(tmp_path / "in.jsonl", [_record("a"), _record("b")])
    else:
        first = write_lines(tmp_path / "p" / f"{CLAUDE_ID}.jsonl", claude_lines())
    second = write_lines(tmp_path / "more.jsonl", [_record("c")])
    seen: list[str] = []
    with pytest.raises(StoreFullError):
        import_paths(open_engine(head_db), [first, second], kind=kind,
                     progress=lambda path, _summary: seen.append(path))
    assert seen == [] and _counts(head_db) == (0, 0)
