"""hermes-store upgrade / current / check."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import execute, run

from hermes_store.db import migrate


def test_upgrade_creates_the_store_at_head(empty_store: str) -> None:
    result = run("--db", empty_store, "upgrade")
    assert result.exit_code == 0, result.output
    assert migrate.status(empty_store).at_head
    result = run("--db", empty_store, "check")
    assert result.exit_code == 0, result.output


def test_upgrade_uses_hermes_home_by_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    assert run("upgrade").exit_code == 0
    assert migrate.status(tmp_path / "home" / "state.db").at_head


def test_current_reports_legacy_then_head(legacy_db) -> None:
    path = legacy_db(6)
    result = run("--db", str(path), "--json", "current")
    assert result.exit_code == 6
    assert json.loads(result.output)["state"] == "legacy"
    run("--db", str(path), "upgrade")
    result = run("--db", str(path), "--json", "current")
    assert result.exit_code == 0
    assert json.loads(result.output)["revision"] == migrate.head_revision()


def test_check_exits_1_until_upgraded(legacy_db) -> None:
    path = legacy_db(11)
    assert run("--db", str(path), "check").exit_code == 1
    run("--db", str(path), "upgrade")
    result = run("--db", str(path), "check")
    assert result.exit_code == 0, result.output


def test_schema_errors_map_to_exit_6(empty_store: str) -> None:
    execute(empty_store, "CREATE TABLE sessions (id TEXT)")
    result = run("--db", empty_store, "upgrade")
    assert result.exit_code == 6
    assert "nothing was changed" in result.output
    assert run("--db", empty_store, "check").exit_code != 0


def test_check_names_drift_in_words_not_object_reprs(legacy_db) -> None:
    path = legacy_db(21)
    result = run("--db", str(path), "check")
    assert result.exit_code == 1
    assert "drift: add column sessions.pinned INTEGER NOT NULL DEFAULT 0" in result.stdout
    doc = json.loads(run("--db", str(path), "--json", "check").stdout)
    assert "add column sessions.last_activity_at REAL" in doc["drift"]
    for text in [result.stdout, *doc["drift"]]:
        assert " at 0x" not in text and "Column(" not in text and "Clause" not in text


def test_drift_of_indexes_tables_and_modified_columns_reads_as_ddl() -> None:
    from sqlalchemy import Column, Index, Integer, MetaData, Table, Text, text

    from hermes_store.cli.schema import describe_drift

    md = MetaData()
    t = Table("notes", md, Column("id", Integer, primary_key=True),
              Column("body", Text, nullable=False, server_default=text("''")))
    assert describe_drift(("add_table", t)) == "add table notes"
    assert describe_drift(("remove_index", Index("ix_body", t.c.body))) == (
        "remove index ix_body on notes (body)")
    assert describe_drift(("remove_column", None, "notes", t.c.body)) == (
        "remove column notes.body TEXT NOT NULL DEFAULT ''")
    assert describe_drift([("modify_nullable", None, "notes", "body", {}, True, False),
                           ("modify_type", None, "notes", "body", {}, Text(), Integer())]) == (
        "modify nullable notes.body: True -> False; modify type notes.body: TEXT -> INTEGER")


def test_check_says_it_checks_the_schema_only_and_points_to_doctor(head_db: Path) -> None:
    result = run("--db", str(head_db), "check")
    assert result.exit_code == 0
    assert "schema" in result.stdout and "hermes-store doctor" in result.stdout
    doc = json.loads(run("--db", str(head_db), "--json", "check").stdout)
    assert doc["checked"] == "schema" and "hermes-store doctor" in doc["note"]
