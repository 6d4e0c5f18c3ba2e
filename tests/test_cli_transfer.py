"""hermes-store export and import: targets, selection, stdout, refusals, discovery, per-file
summaries and exit 8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import (
    continues,
    fingerprint,
    make_session,
    rows,
    run,
    run_json,
    sha256,
    store_exists,
)

from hermes_store.cli import app
from hermes_store.db import migrate
from hermes_store.transfer.documents import verify_markdown

A = "20260101_100000_aaaa1111"
B = "20260102_100000_bbbb2222"
CLAUDE_ID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, A, age_days=3, title="Alpha", texts=("first prompt", "second"))
    make_session(head_store, B, age_days=1, source="telegram", ended=False, texts=("hi",))
    return head_store


def claude_log(root: Path, sid: str = CLAUDE_ID) -> Path:
    path = root / "projects" / "-home-ana-app" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = {"sessionId": sid, "cwd": "/home/ana/app", "gitBranch": "main", "version": "2.0.33",
            "isSidechain": False, "userType": "external", "parentUuid": None}
    lines = [
        {**base, "type": "user", "uuid": "u1", "timestamp": "2025-11-19T21:20:00.000Z",
         "message": {"role": "user", "content": "what changed?"}},
        {**base, "type": "assistant", "uuid": "u2", "timestamp": "2025-11-19T21:20:05.000Z",
         "message": {"id": "msg_1", "model": "claude-sonnet-4", "role": "assistant",
                     "content": [{"type": "text", "text": "Nothing much."}],
                     "usage": {"input_tokens": 3, "output_tokens": 4}}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def table(store: str | Path, sql: str) -> list[tuple[object, ...]]:
    return sorted(rows(store, sql), key=repr)


# --------------------------------------------------------------------------- export


def test_jsonl_export_round_trips_through_import(seeded: str, tmp_path: Path) -> None:
    out = tmp_path / "backup.jsonl"
    code, doc = run_json("--db", seeded, "export", str(out))
    assert (code, doc["sessions"], doc["messages"]) == (0, 2, 3)
    assert len(out.read_text().splitlines()) == 2
    copy = tmp_path / "copy.db"
    result = run("--db", str(copy), "import", str(out))
    assert result.exit_code == 0, result.output
    sql = "SELECT id, source, title, started_at, ended_at FROM sessions"
    assert table(copy, sql) == table(seeded, sql)
    sql = "SELECT id, session_id, role, content, timestamp FROM messages"
    assert table(copy, sql) == table(seeded, sql)


def test_dash_means_stdout_and_never_a_file_named_dash(seeded: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("--db", seeded, "export", "-", "--session-id", A)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["id"] == A
    assert not (tmp_path / "-").exists()
    assert run("--db", seeded, "--json", "export", "-").exit_code == 2


def test_existing_output_needs_force(seeded: str, tmp_path: Path) -> None:
    out = tmp_path / "b.jsonl"
    out.write_text("keep me")
    result = run("--db", seeded, "export", str(out))
    assert result.exit_code == 1 and out.read_text() == "keep me"
    assert run("--db", seeded, "export", str(out), "--force").exit_code == 0
    assert out.read_text() != "keep me"


def test_session_ids_take_prefixes_and_report_unknown_and_ambiguous(seeded: str,
                                                                   tmp_path: Path) -> None:
    code, doc = run_json("--db", seeded, "export", str(tmp_path / "a.jsonl"),
                         "--session-id", "20260101")
    assert code == 0 and doc["sessions"] == 1
    assert run("--db", seeded, "export", str(tmp_path / "x.jsonl"), "--session-id",
               "nope_nope").exit_code == 3
    assert run("--db", seeded, "export", str(tmp_path / "y.jsonl"), "--session-id",
               "2026010").exit_code == 4


def test_dry_run_lists_and_writes_nothing(seeded: str, tmp_path: Path) -> None:
    code, doc = run_json("--db", seeded, "export", str(tmp_path / "d.jsonl"), "--dry-run")
    assert code == 0 and doc["dry_run"] is True
    assert {p["id"] for p in doc["plan"]} == {A, B} and doc["messages"] == 3
    assert not (tmp_path / "d.jsonl").exists()


def test_filters_and_ended_only_select_sessions(seeded: str, tmp_path: Path) -> None:
    _, doc = run_json("--db", seeded, "export", "-", "--dry-run", "--source", "telegram")
    assert [p["id"] for p in doc["plan"]] == [B]
    _, doc = run_json("--db", seeded, "export", "-", "--dry-run", "--ended-only")
    assert [p["id"] for p in doc["plan"]] == [A]


def test_md_of_everything_needs_all_and_writes_verified_files(seeded: str,
                                                             tmp_path: Path) -> None:
    target = tmp_path / "md"
    result = run("--db", seeded, "export", f"{target}/", "--format", "md")
    assert result.exit_code == 2 and "--all" in result.stderr
    assert run("--db", seeded, "export", f"{target}/", "--format", "md", "--all").exit_code == 0
    files = sorted(target.glob("*.md"))
    assert len(files) == 2 and all(verify_markdown(f) for f in files)
    assert (target / "manifest.jsonl").exists()


def _manifest(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "manifest.jsonl").read_text().splitlines()]


def test_the_manifest_holds_each_file_once_with_its_real_checksum(seeded: str,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "md"
    args = ("--db", seeded, "export", f"{target}/", "--format", "md", "--all")
    assert run(*args).exit_code == 0
    assert run(*args, "--force").exit_code == 0  # a second export into the same directory
    records = _manifest(target)
    assert sorted(r["session_id"] for r in records) == [A, B]
    for record in records:
        assert record["sha256"] == sha256(target / record["path"])  # what sha256sum prints


def test_verify_checks_an_export_against_its_manifest(seeded: str, tmp_path: Path) -> None:
    target = tmp_path / "md"
    assert run("--db", seeded, "export", f"{target}/", "--format", "md", "--all"
               ).exit_code == 0
    code, doc = run_json("verify", str(target))
    assert (code, doc["verified"], doc["problems"]) == (0, True, 0)
    assert {f["status"] for f in doc["files"]} == {"ok"}
    first, second = sorted(target.glob("*.md"))
    first.write_text(first.read_text().replace("first prompt", "first prompt!"))
    second.unlink()
    result = run("verify", str(target / "manifest.jsonl"))
    assert result.exit_code == 1
    assert f"changed  {first.name}" in result.stdout and f"missing  {second.name}" in result.stdout
    assert run("verify", str(tmp_path / "nowhere")).exit_code == 3


def test_trace_defaults_to_the_most_recent_session(seeded: str) -> None:
    result = run("--db", seeded, "export", "-", "--format", "trace")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines and {line["sessionId"] for line in lines} == {B}


def test_only_user_prompts(seeded: str) -> None:
    result = run("--db", seeded, "export", "-", "--only", "user-prompts", "--session-id", A)
    prompts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [p["text"] for p in prompts] == ["first prompt", "second"]


def test_export_of_a_compressed_ancestor_names_the_tip(head_store: str) -> None:
    root = make_session(head_store, "20250301_100000_root0001", age_days=3,
                        end_reason="compression")
    tip = make_session(head_store, "20250301_110000_tip00002", age_days=1, parent=root)
    continues(head_store, root, tip)
    result = run("--db", head_store, "export", "-", "--session-id", root)
    assert f"continued in {tip}" in result.stderr


def test_export_reads_without_changing_the_store(seeded: str, tmp_path: Path) -> None:
    before = fingerprint(seeded)
    run("--db", seeded, "export", str(tmp_path / "z.jsonl"))
    assert fingerprint(seeded) == before


# --------------------------------------------------------------------------- import


def test_import_without_path_lists_discovered_files_and_needs_all(
        empty_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    log = claude_log(tmp_path / "claude")
    db = empty_store
    result = run("--db", db, "import")
    assert result.exit_code == 2 and str(log) in result.stderr and not store_exists(db)
    code, doc = run_json("--db", db, "import", "--all")
    assert code == 0 and doc["sessions_imported"] == 1
    assert rows(db, "SELECT source FROM sessions") == [("claude-code",)]
    _, doc = run_json("--db", db, "import", "--all")
    assert doc["sessions_imported"] == 0 and doc["files"][0]["status"] == "already_imported"
    assert rows(db, "SELECT count(*) FROM sessions") == [(1,)]


def test_import_since_skips_older_files(empty_store: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    log = claude_log(tmp_path / "claude")
    import os
    os.utime(log, (0, 946684800 + 86400))
    _, doc = run_json("--db", empty_store, "import", "--all", "--since", "30d")
    assert doc["files"] == []


def test_a_failed_file_gives_exit_8_with_a_per_file_summary(head_store: str,
                                                            tmp_path: Path) -> None:
    good = claude_log(tmp_path / "claude")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"neither": "format"}\n')
    result = run("--db", head_store, "import", str(bad), str(good))
    assert result.exit_code == 8
    assert f"{bad} (?): failed" in result.stderr and f"{good} (claude): imported" in result.stderr
    assert rows(head_store, "SELECT count(*) FROM sessions") == [(1,)]
    code, doc = run_json("--db", head_store, "import", str(bad))
    assert code == 8 and doc["ok"] is False and doc["error"]["failed"] == [str(bad)]


def test_import_dry_run_writes_nothing(head_store: str, tmp_path: Path) -> None:
    log = claude_log(tmp_path / "claude")
    before = fingerprint(head_store)
    code, doc = run_json("--db", head_store, "import", str(log), "--dry-run")
    assert code == 0 and doc["dry_run"] is True and doc["sessions_imported"] == 1
    assert fingerprint(head_store) == before


def test_import_into_a_store_behind_the_code_exits_6(legacy_db, tmp_path: Path) -> None:
    path = legacy_db(11)
    before = sha256(path)
    assert run("--db", str(path), "import", str(claude_log(tmp_path))).exit_code == 6
    assert sha256(path) == before and migrate.status(path).state == "legacy"


def test_import_on_a_terminal_offers_a_picker(empty_store: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    claude_log(tmp_path / "claude")
    claude_log(tmp_path / "claude", "1b1c2d3e-4f50-6172-8394-a5b6c7d8e9f1")
    monkeypatch.setattr(app, "stdin_is_tty", lambda: True)
    db = empty_store
    result = run("--db", db, "import", input="\n")
    assert result.exit_code == 1 and "Nothing changed." in result.stderr
    assert not store_exists(db)
    result = run("--db", db, "import", input="2\n")
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT count(*) FROM sessions") == [(1,)]


def test_the_same_claude_log_under_another_name_is_not_imported_twice(head_store: str,
                                                                      tmp_path: Path) -> None:
    log = claude_log(tmp_path / "claude")
    copy = tmp_path / "elsewhere" / "renamed-copy.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(log.read_bytes())
    code, first = run_json("--db", head_store, "import", str(log))
    assert (code, first["sessions_imported"]) == (0, 1)
    code, again = run_json("--db", head_store, "import", str(copy))
    assert (code, again["sessions_imported"]) == (0, 0)
    assert again["files"][0]["status"] != "imported"
    assert rows(head_store, "SELECT count(*) FROM sessions") == [(1,)]


def test_a_log_whose_start_moved_is_found_by_its_foreign_id(head_store: str,
                                                            tmp_path: Path) -> None:
    # The native id embeds the start time; the (tool, foreign id) key still finds the session.
    log = claude_log(tmp_path / "claude")
    code, first = run_json("--db", head_store, "import", str(log))
    assert (code, first["sessions_imported"]) == (0, 1)
    log.write_text(log.read_text().replace("2025-11-19T21:20:00.000Z",
                                           "2025-11-19T21:19:00.000Z"))
    code, again = run_json("--db", head_store, "import", str(log))
    assert (code, again["sessions_imported"]) == (0, 0), again
    assert again["files"][0]["session_ids"] == first["files"][0]["session_ids"]
    assert rows(head_store, "SELECT count(*) FROM sessions") == [(1,)]
