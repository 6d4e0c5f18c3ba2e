"""The operator's whole path on real legacy stores, and every command on every legacy fixture.

upgrade → stats → search → export jsonl → import into a new file → same sessions and
messages → prune --dry-run changes nothing → compact → repair --check-only.

The legacy stores are SQLite files; their backup moves into a store on either backend, where
every command that has a server meaning runs too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from cli_support import fingerprint, rows, run, run_json, sha256

from hermes_store.db.models import Base
from hermes_store.transfer.load import LIVE_STATE_COLUMNS

VERSIONS = (1, 2, 4, 6, 10, 11, 21)
WORD, CJK_BIGRAM = "cargo", "闭包"


def table_rows(path: Path, table: str, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    assert table in ("sessions", "messages")
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    try:
        found = [dict(r) for r in con.execute(f"SELECT * FROM {table} ORDER BY id")]
    finally:
        con.close()
    return [{k: v for k, v in r.items() if k not in skip} for r in found]


@pytest.fixture
def upgraded(legacy_db):
    def make(version: int) -> Path:
        path = legacy_db(version)
        code, doc = run_json("--db", str(path), "upgrade")
        assert code == 0 and doc["revision"] == doc["head"]
        return path
    return make


@pytest.mark.parametrize("version", (6, 11, 21))
def test_upgrade_search_export_import_prune_optimize_repair(legacy_db, tmp_path: Path,
                                                            version: int) -> None:
    path = legacy_db(version)
    legacy_sessions = table_rows(path, "sessions")
    legacy_messages = table_rows(path, "messages")

    code, doc = run_json("--db", str(path), "upgrade")
    assert code == 0 and doc["before"] == "legacy" and doc["backup"]

    code, doc = run_json("--db", str(path), "stats")
    assert code == 0
    assert doc["sessions"]["total"] == len(legacy_sessions) == 16
    assert doc["messages"]["total"] == len(legacy_messages) == 358

    for term in (WORD, CJK_BIGRAM):
        code, doc = run_json("--db", str(path), "search", term)
        assert code == 0 and doc["count"] > 0, term
        assert all(term.lower() in h["snippet"].lower()
                   for r in doc["results"] for h in r["hits"]), term

    backup = tmp_path / "backup.jsonl"
    code, doc = run_json("--db", str(path), "export", str(backup))
    assert code == 0 and (doc["sessions"], doc["messages"]) == (16, 358)

    copy = tmp_path / "copy.db"
    code, doc = run_json("--db", str(copy), "import", str(backup))
    assert code == 0 and doc["sessions_imported"] == 16 and doc["messages_imported"] == 358
    for table, skip in (("messages", frozenset()), ("sessions", LIVE_STATE_COLUMNS)):
        copied, source = table_rows(copy, table, skip), table_rows(path, table, skip)
        # A fresh store has the modelled columns; upstream-only ones of an adopted store stay
        # in the backup file but have nowhere to go.
        upstream_only = set(source[0]) - set(copied[0])
        assert not upstream_only & set(Base.metadata.tables[table].c.keys())
        assert copied == [{k: v for k, v in r.items() if k not in upstream_only}
                          for r in source]

    before = (sha256(path), table_rows(path, "sessions"), table_rows(path, "messages"))
    code, doc = run_json("--db", str(path), "prune", "--older-than", "1s", "--dry-run")
    assert code == 0 and doc["dry_run"] is True and doc["matched"] > 0 and doc["changed"] == 0
    assert (sha256(path), table_rows(path, "sessions"), table_rows(path, "messages")) == before

    code, doc = run_json("--db", str(path), "compact")
    assert code == 0
    result = run("--db", str(path), "repair", "--check-only")
    assert result.exit_code == 0, result.output
    assert table_rows(path, "messages") == before[2]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_reading_command_works_on_every_upgraded_fixture(upgraded, tmp_path: Path,
                                                                version: int) -> None:
    path = upgraded(version)
    db = ("--db", str(path))
    code, listing = run_json(*db, "list", "--all", "--limit", "100")
    assert code == 0 and listing["count"] == 16
    sid = listing["sessions"][0]["id"]
    before = sha256(path)
    for args in (["current"], ["check"], ["stats"], ["doctor"], ["list"],
                 ["list", "--open"], ["show", sid[:12]], ["show", sid, "--lineage", "--tail", "3"],
                 ["search", WORD], ["search", CJK_BIGRAM, "--include-tools"],
                 ["export", str(tmp_path / "x.jsonl"), "--dry-run"],
                 ["export", "-", "--dry-run", "--format", "trace"],
                 ["prune", "--dry-run", "--older-than", "1s"],
                 ["archive", "--dry-run", "--older-than", "1s"],
                 ["close", "--dry-run", "--older-than", "1s"],
                 ["delete", sid, "--dry-run"]):
        code, doc = run_json(*db, *args)
        assert code == 0, (args, doc)
        assert doc["ok"] is True and doc["command"] == args[0]
    assert sha256(path) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_every_export_format_works_on_every_upgraded_fixture(upgraded, tmp_path: Path,
                                                              version: int) -> None:
    path = upgraded(version)
    db = ("--db", str(path))
    for args in (["export", str(tmp_path / "all.jsonl")],
                 ["export", f"{tmp_path}/md/", "--format", "md", "--all"],
                 ["export", str(tmp_path / "all.html"), "--format", "html"],
                 ["export", f"{tmp_path}/trace/", "--format", "trace", "--source", "cli"]):
        code, doc = run_json(*db, *args)
        assert code == 0 and doc["sessions"] > 0, (args, doc)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_changing_command_works_on_every_upgraded_fixture(upgraded, version: int) -> None:
    path = upgraded(version)
    db = ("--db", str(path))
    _, listing = run_json(*db, "list", "--all", "--limit", "100")
    ended = [s["id"] for s in listing["sessions"] if s["ended_at"] and not s["pinned"]]
    first, second = ended[0], ended[1]
    steps: list[list[str]] = [
        ["pin", first], ["unpin", first], ["rename", first, "Renamed", "by", "test"],
        ["archive", second, "--yes"], ["unarchive", second],
        ["close", "--older-than", "1s", "--yes"],
        ["delete", second, "--yes", "--keep-children"],
        ["prune", "--older-than", "1s", "--yes"],
        ["optimize-storage", "--yes"], ["compact"], ["repair", "--check-only"],
    ]
    for args in steps:
        code, doc = run_json(*db, *args)
        assert code == 0, (args, doc)
        assert doc["ok"] is True
    _, after = run_json(*db, "list", "--all", "--limit", "100")
    assert second not in {s["id"] for s in after["sessions"]}
    assert after["count"] < listing["count"]


def _modelled(store: str | Path, table: str, skip: frozenset[str]) -> list[tuple[Any, ...]]:
    names = [c.key for c in Base.metadata.tables[table].c if c.key not in skip]
    return rows(store, f"SELECT {', '.join(names)} FROM {table} ORDER BY id")


def test_a_legacy_backup_works_in_a_store_on_either_backend(legacy_db, head_store: str,
                                                            tmp_path: Path) -> None:
    path = legacy_db(21)
    assert run_json("--db", str(path), "upgrade")[0] == 0
    backup = tmp_path / "backup.jsonl"
    assert run_json("--db", str(path), "export", str(backup))[0] == 0
    db = ("--db", head_store)
    code, doc = run_json(*db, "import", str(backup))
    assert code == 0 and (doc["sessions_imported"], doc["messages_imported"]) == (16, 358)
    for table, skip in (("messages", frozenset()), ("sessions", LIVE_STATE_COLUMNS)):
        assert _modelled(head_store, table, skip) == _modelled(path, table, skip), table

    for term in (WORD, CJK_BIGRAM):
        code, doc = run_json(*db, "search", term)
        assert code == 0 and doc["count"] > 0, term
        assert all(term.lower() in h["snippet"].lower()
                   for r in doc["results"] for h in r["hits"]), term
    _, listing = run_json(*db, "list", "--all", "--limit", "100")
    assert listing["count"] == 16
    sid = listing["sessions"][0]["id"]
    reading = [["check"], ["list"], ["list", "--open"], ["show", sid[:12]],
               ["show", sid, "--lineage", "--tail", "3"], ["search", WORD],
               ["search", CJK_BIGRAM, "--include-tools"],
               ["export", str(tmp_path / "x.jsonl"), "--dry-run"],
               ["export", "-", "--dry-run", "--format", "trace"],
               ["prune", "--dry-run", "--older-than", "1s"],
               ["archive", "--dry-run", "--older-than", "1s"],
               ["close", "--dry-run", "--older-than", "1s"], ["delete", sid, "--dry-run"],
               ["current"], ["stats"], ["doctor"]]
    before = fingerprint(head_store)
    for args in reading:
        code, doc = run_json(*db, *args)
        assert (code, doc["ok"], doc["command"]) == (0, True, args[0]), (args, doc)
    assert fingerprint(head_store) == before

    ended = [s["id"] for s in listing["sessions"] if s["ended_at"] and not s["pinned"]]
    first, second = ended[0], ended[1]
    for args in (["pin", first], ["unpin", first], ["rename", first, "Renamed", "by", "test"],
                 ["archive", second, "--yes"], ["unarchive", second],
                 ["close", "--older-than", "1s", "--yes"],
                 ["delete", second, "--yes", "--keep-children"],
                 ["prune", "--older-than", "1s", "--yes"]):
        code, doc = run_json(*db, *args)
        assert (code, doc["ok"]) == (0, True), (args, doc)
    _, after = run_json(*db, "list", "--all", "--limit", "100")
    assert second not in {s["id"] for s in after["sessions"]}
    assert after["count"] < listing["count"]
