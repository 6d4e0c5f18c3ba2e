"""The command line's smaller promises: counts and plurals that read right, errors that name
the real cause, and nothing created by a command that changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from cli_support import make_session, run, run_json
from click.testing import CliRunner

from hermes_store.cli import render

A = "20260101_100000_aaaa1111"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, A, age_days=200, texts=("hello",))
    return head_store


def test_an_export_of_everything_counts_progress_against_every_session(head_store: str,
                                                                      tmp_path: Path) -> None:
    for i in range(40):
        make_session(head_store, f"20260101_10{i:04d}_many{i:04d}")
    result = run("--db", head_store, "export", str(tmp_path / "all.jsonl"))
    assert result.exit_code == 0
    assert "sessions: 40/40" in result.stderr
    assert "1/1" not in result.stderr


def test_ctrl_c_under_json_still_prints_one_json_document(seeded: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_store.repo import listing, prepared_reads

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    # a server lists through the repo, a file through the compiled statements
    monkeypatch.setattr(listing, "list_matching", interrupted)
    monkeypatch.setattr(prepared_reads, "list_page", interrupted)
    result = run("--db", seeded, "--json", "list")
    assert result.exit_code == 130
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["error"]["code"] == "interrupted"


def test_importing_a_missing_file_is_not_found(seeded: str, tmp_path: Path) -> None:
    code, doc = run_json("--db", seeded, "import", str(tmp_path / "missing.jsonl"))
    assert code == 3
    assert doc["error"]["message"] == f"no such file: {tmp_path / 'missing.jsonl'}"


def test_importing_a_directory_says_it_is_one(seeded: str, tmp_path: Path) -> None:
    result = run("--db", seeded, "import", str(tmp_path))
    assert result.exit_code == 2
    assert "is a directory" in result.stderr and "no such file" not in result.stderr


def test_importing_a_junk_file_into_no_store_creates_nothing(tmp_path: Path) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text("this is not a log\n\x00\x01 neither is this\n")
    target = tmp_path / "state.db"
    result = run("--db", str(target), "import", str(junk))
    assert result.exit_code == 8  # the format cannot be told
    assert not target.exists()
    result = run("--db", str(target), "import", "--from", "jsonl", str(junk))
    assert "2 malformed lines" in result.stderr
    assert not target.exists()
    assert not Path(f"{target}-wal").exists() and not Path(f"{target}-shm").exists()
    assert run("--db", str(target), "import", "--dry-run", str(junk)).exit_code == 8
    assert not target.exists()


def test_a_too_short_prefix_says_so(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "show", "202")
    assert code == 3
    assert "at least 4 characters" in doc["error"]["message"]


def test_a_huge_query_is_not_echoed_back_in_full(seeded: str) -> None:
    query = "zzqx " * 400
    result = run("--db", seeded, "search", query)
    assert result.exit_code == 0
    assert "no messages match" in result.stdout
    assert len(result.stdout) < 200


@pytest.mark.parametrize(("args", "text"), [
    (["prune", "--dry-run"], "would delete 1 session (dry run)"),
    (["delete", A, "--dry-run"], "would delete 1 session, 1 message"),
    (["pin", A, "--dry-run"], "would pin 1 session"),
    (["export", "-", "--dry-run"], "would export 1 session, 1 message"),
])
def test_counts_of_one_read_in_the_singular(seeded: str, args: list[str], text: str) -> None:
    result = run("--db", seeded, *args)
    assert result.exit_code == 0, result.output
    assert text in result.stdout
    assert "1 sessions" not in result.output and "would change" not in result.output


def test_the_helper_pluralises_with_thousands() -> None:
    assert (render.count(1, "session"), render.count(0, "message"), render.count(12000, "file")) == (
        "1 session", "0 messages", "12,000 files")


def test_damage_advice_names_the_real_store(tmp_path: Path) -> None:
    damaged = tmp_path / "state.db"
    # A store whose first page was lost (a text file is "not an SQLite database" instead).
    damaged.write_bytes(b"\0" * 4096 + b"[session]\nid = 20260802_120000_fff666\n" * 500)
    code, doc = run_json("--db", str(damaged), "list")
    assert code == 7, doc
    assert f"recover --source {damaged}" in doc["error"]["message"]
    assert "PATH" not in doc["error"]["message"]


def test_reading_a_legacy_store_through_open_engine_says_to_upgrade(legacy_db) -> None:
    from sqlalchemy import select

    from hermes_store import ChatSession, open_engine
    from hermes_store.engine import read_session
    from hermes_store.errors import SchemaMismatchError

    path = legacy_db(6)
    with (pytest.raises(SchemaMismatchError, match="hermes-store upgrade") as info,
          read_session(open_engine(path)) as s):
        s.scalars(select(ChatSession).limit(1)).all()
    assert str(path) in str(info.value) and "no such column" in str(info.value)


@pytest.mark.parametrize(("hint", "shown"), [
    ("hermes-store repair --check-only, then hermes-store repair",
     "`hermes-store repair --check-only`, then `hermes-store repair`"),
    ("stop idle readers, then hermes-store compact",
     "stop idle readers, then `hermes-store compact`"),
    ("hermes-store stats (under a Python whose SQLite has dbstat)",
     "`hermes-store stats` (under a Python whose SQLite has dbstat)"),
    ("hermes-store close --older-than 1d", "`hermes-store close --older-than 1d`"),
    ("prefer a Python built with SQLite >= 3.51.3; to salvage, hermes-store recover "
     "(it reads a copy)", "prefer a Python built with SQLite >= 3.51.3; to salvage, "
     "`hermes-store recover` (it reads a copy)"),
])
def test_doctor_hints_quote_only_the_commands(hint: str, shown: str) -> None:
    assert render.commands_marked(hint) == shown


def test_doctor_hints_never_quote_prose_as_a_command(head_store: str) -> None:
    result = run("--db", head_store, "doctor")
    for line in result.stdout.splitlines():
        for quoted in line.split("`")[1::2]:
            assert quoted.startswith("hermes-store ") and ";" not in quoted, line
            assert " works " not in quoted and " then " not in quoted, line


def test_doctor_prints_a_damage_hint_as_two_commands(tmp_path: Path) -> None:
    from hermes_store.cli.health import _render_findings
    from hermes_store.ops.stats import Finding

    result = CliRunner().invoke(click.Command("x", callback=lambda: _render_findings(
        "state.db", [Finding("quick_check", "damage", "page 7 corrupt",
                             "hermes-store repair --check-only, then hermes-store repair")])))
    assert "-> `hermes-store repair --check-only`, then `hermes-store repair`" in result.stdout
