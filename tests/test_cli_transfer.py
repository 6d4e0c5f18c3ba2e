"""hermes-store export and import: targets, selection, stdout, refusals, discovery, per-file
summaries and exit 8."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_support import make_session, rows, run, run_json, sha256
from click.testing import CliRunner

from hermes_store.cli import app, main
from hermes_store.db import migrate
from hermes_store.transfer.documents import verify_markdown

A = "20260101_100000_aaaa1111"
B = "20260102_100000_bbbb2222"
CLAUDE_ID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


@pytest.fixture
def store(head_db: Path) -> Path:
    make_session(head_db, A, age_days=3, title="Alpha", texts=("first prompt", "second"))
    make_session(head_db, B, age_days=1, source="telegram", ended=False, texts=("hi",))
    return head_db


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


def table(path: Path, sql: str) -> list[tuple[object, ...]]:
    return sorted(rows(path, sql), key=repr)


# --------------------------------------------------------------------------- export


def test_jsonl_export_round_trips_through_import(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "backup.jsonl"
    code, doc = run_json("--db", str(store), "export", str(out))
    assert (code, doc["sessions"], doc["messages"]) == (0, 2, 3)
    assert len(out.read_text().splitlines()) == 2
    copy = tmp_path / "copy.db"
    result = run("--db", str(copy), "import", str(out))
    assert result.exit_code == 0, result.output
    sql = "SELECT id, source, title, started_at, ended_at FROM sessions"
    assert table(copy, sql) == table(store, sql)
    sql = "SELECT id, session_id, role, content, timestamp FROM messages"
    assert table(copy, sql) == table(store, sql)


def test_dash_means_stdout_and_never_a_file_named_dash(store: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("--db", str(store), "export", "-", "--session-id", A)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["id"] == A
    assert not (tmp_path / "-").exists()
    assert run("--db", str(store), "--json", "export", "-").exit_code == 2


def test_existing_output_needs_force(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.jsonl"
    out.write_text("keep me")
    result = run("--db", str(store), "export", str(out))
    assert result.exit_code == 1 and out.read_text() == "keep me"
    assert run("--db", str(store), "export", str(out), "--force").exit_code == 0
    assert out.read_text() != "keep me"


def test_session_ids_take_prefixes_and_report_unknown_and_ambiguous(store: Path,
                                                                   tmp_path: Path) -> None:
    code, doc = run_json("--db", str(store), "export", str(tmp_path / "a.jsonl"),
                         "--session-id", "20260101")
    assert code == 0 and doc["sessions"] == 1
    assert run("--db", str(store), "export", str(tmp_path / "x.jsonl"), "--session-id",
               "nope_nope").exit_code == 3
    assert run("--db", str(store), "export", str(tmp_path / "y.jsonl"), "--session-id",
               "2026010").exit_code == 4


def test_dry_run_lists_and_writes_nothing(store: Path, tmp_path: Path) -> None:
    code, doc = run_json("--db", str(store), "export", str(tmp_path / "d.jsonl"), "--dry-run")
    assert code == 0 and doc["dry_run"] is True
    assert {p["id"] for p in doc["plan"]} == {A, B} and doc["messages"] == 3
    assert not (tmp_path / "d.jsonl").exists()


def test_filters_and_ended_only_select_sessions(store: Path, tmp_path: Path) -> None:
    _, doc = run_json("--db", str(store), "export", "-", "--dry-run", "--source", "telegram")
    assert [p["id"] for p in doc["plan"]] == [B]
    _, doc = run_json("--db", str(store), "export", "-", "--dry-run", "--ended-only")
    assert [p["id"] for p in doc["plan"]] == [A]


def test_md_of_everything_needs_all_and_writes_verified_files(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "md"
    result = run("--db", str(store), "export", f"{target}/", "--format", "md")
    assert result.exit_code == 2 and "--all" in result.stderr
    assert run("--db", str(store), "export", f"{target}/", "--format", "md", "--all").exit_code == 0
    files = sorted(target.glob("*.md"))
    assert len(files) == 2 and all(verify_markdown(f) for f in files)
    assert (target / "manifest.jsonl").exists()


def _manifest(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "manifest.jsonl").read_text().splitlines()]


def test_the_manifest_holds_each_file_once_with_its_real_checksum(store: Path,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "md"
    args = ("--db", str(store), "export", f"{target}/", "--format", "md", "--all")
    assert run(*args).exit_code == 0
    assert run(*args, "--force").exit_code == 0  # a second export into the same directory
    records = _manifest(target)
    assert sorted(r["session_id"] for r in records) == [A, B]
    for record in records:
        assert record["sha256"] == sha256(target / record["path"])  # what sha256sum prints


def test_verify_checks_an_export_against_its_manifest(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "md"
    assert run("--db", str(store), "export", f"{target}/", "--format", "md", "--all"
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


def test_trace_defaults_to_the_most_recent_session(store: Path) -> None:
    result = run("--db", str(store), "export", "-", "--format", "trace")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines and {line["sessionId"] for line in lines} == {B}


def test_only_user_prompts(store: Path) -> None:
    result = run("--db", str(store), "export", "-", "--only", "user-prompts", "--session-id", A)
    prompts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [p["text"] for p in prompts] == ["first prompt", "second"]


def test_export_of_a_compressed_ancestor_names_the_tip(head_db: Path) -> None:
    root = make_session(head_db, "20250301_100000_root0001", age_days=3, end_reason="compression")
    tip = make_session(head_db, "20250301_110000_tip00002", age_days=1, parent=root)
    con = sqlite3.connect(head_db)
    with con:
        con.execute("UPDATE sessions SET started_at = (SELECT ended_at FROM sessions "
                    "WHERE id = ?) WHERE id = ?", (root, tip))
    con.close()
    result = run("--db", str(head_db), "export", "-", "--session-id", root)
    assert f"continued in {tip}" in result.stderr


def test_export_reads_without_changing_the_store(store: Path, tmp_path: Path) -> None:
    before = sha256(store)
    run("--db", str(store), "export", str(tmp_path / "z.jsonl"))
    assert sha256(store) == before


# --------------------------------------------------------------------------- import


def test_import_without_path_lists_discovered_files_and_needs_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    log = claude_log(tmp_path / "claude")
    db = tmp_path / "new.db"
    result = run("--db", str(db), "import")
    assert result.exit_code == 2 and str(log) in result.stderr and not db.exists()
    code, doc = run_json("--db", str(db), "import", "--all")
    assert code == 0 and doc["sessions_imported"] == 1
    assert rows(db, "SELECT source FROM sessions") == [("claude-code",)]
    _, doc = run_json("--db", str(db), "import", "--all")
    assert doc["sessions_imported"] == 0 and doc["files"][0]["status"] == "already_imported"
    assert rows(db, "SELECT count(*) FROM sessions") == [(1,)]


def test_import_since_skips_older_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    log = claude_log(tmp_path / "claude")
    import os
    os.utime(log, (0, 946684800 + 86400))
    _, doc = run_json("--db", str(tmp_path / "n.db"), "import", "--all", "--since", "30d")
    assert doc["files"] == []


def test_a_failed_file_gives_exit_8_with_a_per_file_summary(head_db: Path, tmp_path: Path) -> None:
    good = claude_log(tmp_path / "claude")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"neither": "format"}\n')
    result = run("--db", str(head_db), "import", str(bad), str(good))
    assert result.exit_code == 8
    assert f"{bad} (?): failed" in result.stderr and f"{good} (claude): imported" in result.stderr
    assert rows(head_db, "SELECT count(*) FROM sessions") == [(1,)]
    code, doc = run_json("--db", str(head_db), "import", str(bad))
    assert code == 8 and doc["ok"] is False and doc["error"]["failed"] == [str(bad)]


def test_import_dry_run_writes_nothing(head_db: Path, tmp_path: Path) -> None:
    log = claude_log(tmp_path / "claude")
    before = sha256(head_db)
    code, doc = run_json("--db", str(head_db), "import", str(log), "--dry-run")
    assert code == 0 and doc["dry_run"] is True and doc["sessions_imported"] == 1
    assert sha256(head_db) == before


def test_import_into_a_store_behind_the_code_exits_6(legacy_db, tmp_path: Path) -> None:
    path = legacy_db(11)
    before = sha256(path)
    assert run("--db", str(path), "import", str(claude_log(tmp_path))).exit_code == 6
    assert sha256(path) == before and migrate.status(path).state == "legacy"


def test_import_on_a_terminal_offers_a_picker(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    claude_log(tmp_path / "claude")
    claude_log(tmp_path / "claude", "1b1c2d3e-4f50-6172-8394-a5b6c7d8e9f1")
    monkeypatch.setattr(app, "stdin_is_tty", lambda: True)
    db = tmp_path / "picked.db"
    result = CliRunner().invoke(main, ["--db", str(db), "import"], input="\n")
    assert result.exit_code == 1 and "Nothing changed." in result.stderr and not db.exists()
    result = CliRunner().invoke(main, ["--db", str(db), "import"], input="2\n")
    assert result.exit_code == 0, result.output
    assert rows(db, "SELECT count(*) FROM sessions") == [(1,)]


def test_the_same_claude_log_under_another_name_is_not_imported_twice(head_db: Path,
                                                                      tmp_path: Path) -> None:
    log = claude_log(tmp_path / "claude")
    copy = tmp_path / "elsewhere" / "renamed-copy.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(log.read_bytes())
    code, first = run_json("--db", str(head_db), "import", str(log))
    assert (code, first["sessions_imported"]) == (0, 1)
    code, again = run_json("--db", str(head_db), "import", str(copy))
    assert (code, again["sessions_imported"]) == (0, 0)
    assert again["files"][0]["status"] != "imported"
    assert rows(head_db, "SELECT count(*) FROM sessions") == [(1,)]
