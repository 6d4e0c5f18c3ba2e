"""Exports (docs/formats.md#export): jsonl round trip, verified md, escaped html, real-time traces,
user prompts, redaction everywhere, and safe output handling."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from hermes_store.db import migrate
from hermes_store.db.engine import open_engine, reading, run_write
from hermes_store.db.models import ChatSession, Message
from hermes_store.errors import OutputExistsError, SessionNotFoundError, UsageError
from hermes_store.transfer.documents import verify_markdown
from hermes_store.transfer.export import ExportOptions, ExportResult, export_sessions, plan_export
from hermes_store.transfer.load import import_paths

S, M = ChatSession.__table__, Message.__table__
T0 = 1_780_000_000.0

SK = "sk-ant-api03-" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNbVcXz"
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
AWS = "AKIA" + "Q7W3E9R2T5Y8U1I4O6P0"
HF = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm1234567890"
GSK = "gsk_" + "9f8e7d6c5b4a3210fedcba9876543210abcd"
SECRETS = (SK, GHP, AWS, HF, GSK)


def _export(path: Path, output: Any, ids: list[str] | None = None, **opts: Any) -> ExportResult:
    with reading(open_engine(path)) as conn:
        return export_sessions(conn, output, ids, ExportOptions(**opts))


def _seed(path: Path, sessions: list[dict[str, Any]], messages: list[dict[str, Any]]) -> None:
    def write(conn: Any) -> None:
        for row in sessions:
            conn.execute(insert(S).values(**row))
        for row in messages:
            conn.execute(insert(M).values(**row))

    run_write(open_engine(path), write)


def _calls(*calls: tuple[str, str, Any]) -> str:
    return json.dumps([{"id": cid, "type": "function",
                        "function": {"name": name, "arguments": args if isinstance(args, str)
                                     else json.dumps(args)}} for cid, name, args in calls])


@pytest.fixture
def chat_db(head_db: Path) -> Path:
    """Two sessions: a tool-using chat with hostile HTML, and a short second one."""
    _seed(head_db, [
        {"id": "20260601_100000_aaaa1111", "source": "cli", "title": "Fix <b>flaky</b> test",
         "started_at": T0, "ended_at": T0 + 500, "end_reason": "user_exit", "cwd": "/home/ana/app",
         "git_branch": "main", "model": "claude-sonnet-4", "message_count": 5, "tool_call_count": 1},
        {"id": "20260602_100000_bbbb2222", "source": "telegram", "title": "Second",
         "started_at": T0 + 1000, "message_count": 1},
    ], [
        {"session_id": "20260601_100000_aaaa1111", "role": "user", "timestamp": T0 + 1.125,
         "content": "fix it <script>alert('x')</script>"},
        {"session_id": "20260601_100000_aaaa1111", "role": "assistant", "timestamp": T0 + 7.5,
         "content": "Running it.", "reasoning": "check the test first",
         "tool_calls": _calls(("call_1", "terminal", {"command": "pytest -x"}),
                              ("call_2", "patch", "not json"))},
        {"session_id": "20260601_100000_aaaa1111", "role": "tool", "timestamp": T0 + 15.25,
         "tool_call_id": "call_1", "tool_name": "terminal", "content": "1 failed </details><img src=x>"},
        {"session_id": "20260601_100000_aaaa1111", "role": "system", "timestamp": T0 + 16,
         "content": "summary of earlier work", "active": 1},
        {"session_id": "20260601_100000_aaaa1111", "role": "assistant", "timestamp": T0 + 20,
         "content": "Fixed.", "active": 0, "compacted": 1},
        {"session_id": "20260602_100000_bbbb2222", "role": "user", "timestamp": T0 + 1001,
         "content": "hello"},
    ])
    return head_db


# --------------------------------------------------------------------------- jsonl

def _load_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record["_export"].pop("exported_at")
        records.append(record)
    return records


@pytest.mark.parametrize("version", [4, 11])
def test_jsonl_round_trips_through_import(legacy_db: Callable[[int], Path], tmp_path: Path,
                                          version: int) -> None:
    src = legacy_db(version)
    migrate.upgrade(src)
    first = tmp_path / "first.jsonl"
    result = _export(src, first)
    assert result.sessions == 16 and result.messages == 358

    fresh = tmp_path / "fresh.db"
    migrate.upgrade(fresh)
    imported = import_paths(open_engine(fresh), [first])
    assert imported.exit_code == 0
    assert imported.sessions_imported == 16 and imported.messages_imported == 358

    second = tmp_path / "second.jsonl"
    _export(fresh, second)
    assert _load_jsonl(first) == _load_jsonl(second)


def test_jsonl_carries_every_live_column_and_every_row(legacy_db: Callable[[int], Path],
                                                       tmp_path: Path) -> None:
    src = legacy_db(21)
    migrate.upgrade(src)
    out = tmp_path / "all.jsonl"
    _export(src, out)
    records = _load_jsonl(out)
    con = sqlite3.connect(src)
    session_cols = {r[1] for r in con.execute("PRAGMA table_info(sessions)")}
    message_cols = {r[1] for r in con.execute("PRAGMA table_info(messages)")}
    con.close()
    assert "handoff_state" in session_cols  # an upstream column the models do not have
    for record in records:
        assert session_cols <= set(record)
        for msg in record["messages"]:
            assert set(msg) == message_cols
    lineage = next(r for r in records if r["parent_session_id"])
    assert lineage["_export"]["lineage_session_ids"][-1] == lineage["id"]
    assert lineage["_export"]["format"] == "hermes-store/jsonl"


def test_jsonl_keeps_inactive_and_compacted_rows_with_their_flags(chat_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    _export(chat_db, out, ["20260601_100000_aaaa1111"])
    (record,) = _load_jsonl(out)
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "tool", "system", "assistant"]
    assert (record["messages"][-1]["active"], record["messages"][-1]["compacted"]) == (0, 1)
    assert isinstance(record["started_at"], float)
    assert record["timings"]["wall_clock_ms"] == 500_000


@pytest.mark.parametrize("fmt", ["jsonl", "md", "html", "trace"])
def test_an_engine_source_reads_per_session_and_writes_the_same(chat_db: Path, tmp_path: Path,
                                                               fmt: str) -> None:
    stamp = "2026-01-01T00:00:00Z"
    via_conn = _export(chat_db, f"{tmp_path}/a/", format=fmt, exported_at=stamp)
    via_engine = export_sessions(open_engine(chat_db), f"{tmp_path}/b/", None,
                                 ExportOptions(format=fmt, exported_at=stamp))
    assert (via_engine.sessions, via_engine.messages) == (via_conn.sessions, via_conn.messages)
    for a, b in zip(sorted(via_conn.files), sorted(via_engine.files), strict=False):
        assert Path(a).read_bytes() == Path(b).read_bytes()


def test_no_attachments_omits_the_key(chat_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    _export(chat_db, out, attachments=False)
    assert all("attachments" not in r for r in _load_jsonl(out))


def test_long_sessions_stream_across_pages_in_order(head_db: Path, tmp_path: Path) -> None:
    from hermes_store.transfer.reader import MESSAGE_PAGE

    n = MESSAGE_PAGE * 2 + 7
    _seed(head_db, [{"id": "long", "source": "cli", "started_at": T0, "message_count": n}],
          [{"session_id": "long", "role": "user", "timestamp": T0 + i, "content": f"m{i}"}
           for i in range(n)])
    out = tmp_path / "long.jsonl"
    _export(head_db, out)
    (record,) = _load_jsonl(out)
    assert [m["content"] for m in record["messages"]] == [f"m{i}" for i in range(n)]


def test_a_corrupt_cell_degrades_to_its_raw_value(chat_db: Path, tmp_path: Path) -> None:
    con = sqlite3.connect(chat_db)
    con.execute("UPDATE messages SET content = CAST(x'66ff6f' AS TEXT) WHERE role = 'tool'")
    con.execute("UPDATE messages SET timestamp = 5e246 WHERE role = 'system'")
    con.commit()
    con.close()
    out = tmp_path / "x.jsonl"
    _export(chat_db, out, ["20260601_100000_aaaa1111"])
    (record,) = _load_jsonl(out)
    tool = next(m for m in record["messages"] if m["role"] == "tool")
    assert tool["content"] == {"$b64": "Zv9v"}
    md = _export(chat_db, f"{tmp_path}/md/", ["20260601_100000_aaaa1111"], format="md")
    body = Path(md.files[0]).read_text(encoding="utf-8")
    assert "5e+246" in body and "f\ufffdo" in body


# --------------------------------------------------------------------------- md

def test_markdown_records_and_verifies_its_own_hash(chat_db: Path, tmp_path: Path) -> None:
    result = _export(chat_db, f"{tmp_path}/md/", format="md")
    assert len(result.files) == 2
    first = Path(result.files[0])
    assert first.name == "20260601_100000_aaaa1111-fix-b-flaky-b-test.md"
    text = first.read_text(encoding="utf-8")
    assert text.startswith("---\nsession_id: \"20260601_100000_aaaa1111\"\n")
    for key in ("title", "source", "created_at", "updated_at", "ended_at", "model", "provider",
                "cwd", "archived", "pinned", "message_count", "tool_call_count",
                "lineage_session_ids", "format", "exported_at", "exporter"):
        assert f"\n{key}: " in text
    assert "### Tool — terminal — " in text and "(compacted)" in text
    assert "- Exported messages: 5\n- Messages in store: 5\n" in text
    assert verify_markdown(first)

    first.write_text(text.replace("Running it.", "Running it!"), encoding="utf-8")
    assert not verify_markdown(first)

    manifest = [json.loads(line) for line in (tmp_path / "md" / "manifest.jsonl").read_text().splitlines()]
    assert [m["session_id"] for m in manifest] == ["20260601_100000_aaaa1111", "20260602_100000_bbbb2222"]
    assert manifest[0]["path"] == first.name and len(manifest[0]["sha256"]) == 64


def test_markdown_logical_lineage_writes_one_file_with_segments(legacy_db: Callable[[int], Path],
                                                               tmp_path: Path) -> None:
    src = legacy_db(11)
    migrate.upgrade(src)
    result = _export(src, f"{tmp_path}/md/", ["20260707_060600_e4ca3a"], format="qmd", lineage="logical")
    (path,) = result.files
    assert path.endswith(".qmd")
    text = Path(path).read_text(encoding="utf-8")
    assert "## Compression segment: 20260707_060600_e4ca3a" in text
    assert "## Compression segment: 20260808_070700_219dc0" in text
    assert verify_markdown(path)


def test_logical_lineage_follows_the_continuation_not_an_earlier_subagent(head_db: Path,
                                                                          tmp_path: Path) -> None:
    # P spawned subagent S while running, then ended in compression and continued in C.
    p, sub, cont = "20260601_100000_pppp0000", "20260601_100100_ssss0000", "20260601_110000_cccc0000"
    _seed(head_db, [
        {"id": p, "source": "cli", "started_at": T0, "ended_at": T0 + 3600,
         "end_reason": "compression"},
        {"id": sub, "source": "cli", "parent_session_id": p, "started_at": T0 + 60,
         "ended_at": T0 + 120, "end_reason": "user_exit"},
        {"id": cont, "source": "cli", "parent_session_id": p, "started_at": T0 + 3600},
    ], [{"session_id": sid, "role": "user", "timestamp": T0 + 3601, "content": f"said in {sid}"}
        for sid in (p, sub, cont)])
    (path,) = _export(head_db, f"{tmp_path}/md/", [p], format="md", lineage="logical").files
    text = Path(path).read_text(encoding="utf-8")
    assert f"## Compression segment: {p}" in text and f"## Compression segment: {cont}" in text
    assert sub not in text
    # The subagent is its own lineage: a compression-ended parent does not make it a segment.
    (path,) = _export(head_db, f"{tmp_path}/sub/", [sub], format="md", lineage="logical").files
    assert p not in Path(path).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- html

def test_html_escapes_the_transcript_and_is_self_contained(chat_db: Path, tmp_path: Path) -> None:
    result = _export(chat_db, tmp_path / "page.html", format="html")
    page = Path(result.files[0]).read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<img" not in page and "&lt;/details&gt;&lt;img src=x&gt;" in page
    assert "<b>flaky</b>" not in page
    assert "<details><summary>Output" in page and "<details><summary>Tool call: terminal" in page
    assert "<nav>" in page  # two sessions: a sidebar
    assert "http://" not in page and "https://" not in page and "<link" not in page


def test_html_for_one_session_has_no_sidebar(chat_db: Path, tmp_path: Path) -> None:
    result = _export(chat_db, tmp_path / "one.html", ["20260602_100000_bbbb2222"], format="html")
    page = Path(result.files[0]).read_text(encoding="utf-8")
    assert "<nav>" not in page and "<title>Second</title>" in page


# --------------------------------------------------------------------------- trace

def _trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_trace_lines_carry_each_messages_own_time(chat_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    _export(chat_db, out, ["20260601_100000_aaaa1111"], format="trace")
    lines = _trace(out)
    assert [line["timestamp"] for line in lines] == [
        "2026-05-28T20:26:41.125Z", "2026-05-28T20:26:47.500Z", "2026-05-28T20:26:55.250Z",
        "2026-05-28T20:27:00.000Z",
    ]  # the system row is dropped
    assert lines[0]["parentUuid"] is None
    assert all(b["parentUuid"] == a["uuid"] for a, b in itertools.pairwise(lines))
    assert {(line["cwd"], line["gitBranch"]) for line in lines} == {("/home/ana/app", "main")}
    assistant = lines[1]["message"]
    assert assistant["model"] == "claude-sonnet-4"
    assert assistant["content"][0] == {"type": "thinking", "thinking": "check the test first"}
    assert assistant["content"][2] == {"type": "tool_use", "id": "call_1", "name": "terminal",
                                       "input": {"command": "pytest -x"}}
    assert assistant["content"][3]["input"] == {"raw": "not json"}
    assert lines[2]["type"] == "user" and lines[2]["message"]["content"][0]["tool_use_id"] == "call_1"


def test_trace_uuids_are_stable_across_exports(chat_db: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _export(chat_db, a, ["20260601_100000_aaaa1111"], format="trace")
    _export(chat_db, b, ["20260601_100000_aaaa1111"], format="trace")
    assert a.read_bytes() == b.read_bytes()


def test_trace_row_without_a_usable_time_reuses_the_previous_one(chat_db: Path, tmp_path: Path) -> None:
    con = sqlite3.connect(chat_db)
    con.execute("UPDATE messages SET timestamp = 5e246 WHERE role = 'tool'")
    con.commit()
    con.close()
    out = tmp_path / "t.jsonl"
    result = _export(chat_db, out, ["20260601_100000_aaaa1111"], format="trace")
    lines = _trace(out)
    assert lines[2]["timestamp"] == lines[1]["timestamp"]
    assert any("reuse the previous" in n for n in result.notes)


def test_trace_of_several_sessions_needs_a_directory(chat_db: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        _export(chat_db, tmp_path / "t.jsonl", format="trace")
    result = _export(chat_db, f"{tmp_path}/traces/", format="trace")
    assert sorted(Path(f).name for f in result.files) == [
        "20260601_100000_aaaa1111.trace.jsonl", "20260602_100000_bbbb2222.trace.jsonl"]


# --------------------------------------------------------------------------- user prompts

def test_user_prompts_skip_wrappers_tool_results_and_summaries(chat_db: Path, tmp_path: Path) -> None:
    _seed(chat_db, [], [
        {"session_id": "20260601_100000_aaaa1111", "role": "user", "timestamp": T0 + 30,
         "content": "<system-reminder>be nice</system-reminder>"},
        {"session_id": "20260601_100000_aaaa1111", "role": "user", "timestamp": T0 + 31,
         "content": "# AGENTS.md instructions for /x\n<INSTRUCTIONS>rules</INSTRUCTIONS>"},
        {"session_id": "20260601_100000_aaaa1111", "role": "user", "timestamp": T0 + 40,
         "content": "<environment_context>cwd</environment_context>\nnow ship it"},
    ])
    out = tmp_path / "p.jsonl"
    _export(chat_db, out, ["20260601_100000_aaaa1111"], only="user-prompts")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["index"], r["text"]) for r in records] == [
        (1, "fix it <script>alert('x')</script>"), (2, "now ship it")]
    assert records[0]["created_at"] == "2026-05-28T20:26:41Z" and records[0]["role"] == "user"
    assert set(records[0]) == {"session_id", "index", "created_at", "role", "text", "message_id"}


def test_user_prompts_as_markdown_number_prompts_per_session(chat_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.md"
    _export(chat_db, out, only="user-prompts", format="md")
    text = out.read_text(encoding="utf-8")
    assert "## Fix <b>flaky</b> test" in text and "## Second" in text and "### 1. " in text


# --------------------------------------------------------------------------- redaction

@pytest.fixture
def secret_db(head_db: Path) -> Path:
    _seed(head_db, [{
        "id": "20260603_100000_cccc3333", "source": "cli", "title": f"deploy with {GHP}",
        "started_at": T0, "cwd": f"/srv/{AWS}/app", "git_branch": f"fix/{GHP}",
        "git_repo_root": f"/srv/{AWS}", "system_prompt": f"use key {SK}",
        "model_config": json.dumps({"api_key": HF}), "origin_json": json.dumps({"token": GSK}),
        "message_count": 3, "tool_call_count": 1,
    }], [
        {"session_id": "20260603_100000_cccc3333", "role": "user", "timestamp": T0 + 1,
         "content": f"my key is {SK} and {HF}"},
        {"session_id": "20260603_100000_cccc3333", "role": "assistant", "timestamp": T0 + 2,
         "content": "ok", "reasoning": f"the user leaked {AWS}",
         "tool_calls": _calls(("c1", "terminal", {"command": f"export OPENAI_API_KEY={GSK}"}))},
        {"session_id": "20260603_100000_cccc3333", "role": "tool", "timestamp": T0 + 3,
         "tool_call_id": "c1", "tool_name": "terminal", "content": f"GITHUB_TOKEN={GHP}"},
    ])
    return head_db


def _all_output(root: Path) -> str:
    names = "\n".join(str(p) for p in root.rglob("*"))
    bodies = "\n".join(p.read_text(encoding="utf-8") for p in root.rglob("*") if p.is_file())
    return names + "\n" + bodies


@pytest.mark.parametrize(("fmt", "only", "target"), [
    ("jsonl", None, "x.jsonl"), ("md", None, "md/"), ("qmd", None, "md/"), ("html", None, "x.html"),
    ("trace", None, "t/"), ("jsonl", "user-prompts", "p.jsonl"), ("md", "user-prompts", "p.md"),
])
def test_redaction_leaves_no_seeded_secret_in_any_output_or_file_name(
        secret_db: Path, tmp_path: Path, fmt: str, only: str | None, target: str) -> None:
    root = tmp_path / "out"
    root.mkdir()
    result = _export(secret_db, f"{root}/{target}", format=fmt, only=only, redact=True)
    assert result.redacted and sum(result.redaction_counts.values()) > 0
    everything = _all_output(root)
    for secret in SECRETS:
        assert secret not in everything
    if fmt != "trace" and only is None:  # the (redacted) title is still there
        assert "deploy with" in everything


def test_redaction_also_scans_undecodable_cells(secret_db: Path, tmp_path: Path) -> None:
    con = sqlite3.connect(secret_db)
    con.execute("UPDATE messages SET content = CAST(? || x'ff' AS TEXT) WHERE role = 'user'", (SK,))
    con.commit()
    con.close()
    out = tmp_path / "x.jsonl"
    _export(secret_db, out, redact=True)
    assert SK not in out.read_text(encoding="utf-8") and '"$b64"' not in out.read_text()


def test_trace_redacts_by_default_and_other_formats_do_not(secret_db: Path, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    _export(secret_db, trace, format="trace")
    assert SK not in trace.read_text() and GSK not in trace.read_text()
    plain = tmp_path / "plain.jsonl"
    _export(secret_db, plain)
    assert SK in plain.read_text()


# --------------------------------------------------------------------------- output handling

def test_dash_means_stdout_never_a_file_named_dash(chat_db: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    result = _export(chat_db, "-")
    assert result.files == ["-"] and not (tmp_path / "-").exists()
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [
        "20260601_100000_aaaa1111", "20260602_100000_bbbb2222"]


def test_existing_output_is_not_overwritten_without_force(chat_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    out.write_text("keep me")
    with pytest.raises(OutputExistsError):
        _export(chat_db, out)
    assert out.read_text() == "keep me"
    _export(chat_db, out, force=True)
    assert out.read_text().startswith("{")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failed_export_leaves_no_partial_file(chat_db: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_store.transfer import export

    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("redaction failed")

    monkeypatch.setattr(export.Scrub, "message", boom)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(RuntimeError):
        _export(chat_db, out_dir / "x.jsonl", redact=True)
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize(("fmt", "target"), [("jsonl", "e.jsonl"), ("html", "e.html"), ("md", "md/")])
def test_an_empty_selection_exports_cleanly(head_db: Path, tmp_path: Path, fmt: str, target: str) -> None:
    result = _export(head_db, f"{tmp_path}/{target}", [], format=fmt)
    assert (result.sessions, result.messages) == (0, 0)


def test_plan_export_lists_sessions_and_their_message_counts(chat_db: Path) -> None:
    plan = plan_export(open_engine(chat_db))
    assert [(p["id"], p["messages"]) for p in plan] == [
        ("20260601_100000_aaaa1111", 5), ("20260602_100000_bbbb2222", 1)]
    assert plan[0]["title"] == "Fix <b>flaky</b> test"


def test_unknown_session_and_bad_options_are_refused(chat_db: Path, tmp_path: Path) -> None:
    with pytest.raises(SessionNotFoundError):
        _export(chat_db, tmp_path / "x.jsonl", ["nope"])
    with pytest.raises(UsageError):
        ExportOptions(format="pdf")
    with pytest.raises(UsageError):
        _export(chat_db, "-", format="html")
