"""The upkeep and health commands on both backends: what each means on PostgreSQL, and the
file-only ones saying plainly that they are SQLite-only (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import sql
from cli_support import run, run_json

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod


def _fill(location: str) -> None:
    db = SessionDB(location)
    db.create_session("s1", "cli")
    db.create_session("s2", "telegram")
    for i in range(3):
        db.append_message("s1", "user", f"hello {i}")
    db.end_session("s2", "user_exit")
    db.close()


def test_stats_counts_the_same_content_on_either_backend(head_store: str) -> None:
    _fill(head_store)
    code, doc = run_json("--db", head_store, "stats")
    assert code == 0
    assert doc["sessions"]["total"] == 2 and doc["sessions"]["open"] == 1
    assert doc["messages"]["total"] == 3
    assert {s["source"]: s["sessions"] for s in doc["sources"]} == {"cli": 1, "telegram": 1}
    names = {i["name"]: i["kind"] for i in doc["space"]["items"]}
    assert names["messages"] == "table" and names["idx_messages_session"] == "index"
    assert doc["file_bytes"] > 0


def test_stats_on_a_server_sizes_tables_and_indexes_from_the_catalog(pg_store: str) -> None:
    _fill(pg_store)
    _, doc = run_json("--db", pg_store, "stats")
    assert doc["layout"]["version"] == "postgresql"
    items = {i["name"]: i for i in doc["space"]["items"]}
    assert items["idx_messages_session"]["table"] == "messages"
    assert all(i["bytes"] >= 0 for i in items.values())
    human = run("--db", pg_store, "stats")
    assert human.exit_code == 0 and "(PostgreSQL)" in human.stdout


def test_doctor_reports_a_healthy_store_on_either_backend(head_store: str) -> None:
    _fill(head_store)
    code, doc = run_json("--db", head_store, "doctor")
    assert code == 0 and doc["ok"]
    checks = {f["check"]: f["status"] for f in doc["findings"]}
    assert checks["schema"] == "ok"


def test_compact_on_a_server_is_vacuum_analyze(pg_store: str) -> None:
    _fill(pg_store)
    sql(engine_mod.open_engine(pg_store), "DELETE FROM messages WHERE session_id = 's1'")
    code, doc = run_json("--db", pg_store, "compact")
    assert code == 0 and doc["steps"] == ["vacuum analyze"]
    assert doc["before"]["main"] > 0 and doc["after"]["main"] > 0
    analyzed = sql(engine_mod.open_engine(pg_store),
                   "SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL "
                   "FROM pg_stat_user_tables WHERE relname = 'messages'")
    assert analyzed == [(True,)]
    assert run("--db", pg_store, "optimize").exit_code == 0  # the old name too


@pytest.mark.parametrize("command", [["optimize-storage"],
                                     ["recover", "--output", "OUT", "--inspect-only"]])
def test_file_only_commands_say_they_are_sqlite_only_on_a_server(
        pg_store: str, tmp_path: Path, command: list[str]) -> None:
    args = [str(tmp_path / "new.db") if a == "OUT" else a for a in command]
    result = run("--db", pg_store, *args)
    assert result.exit_code == 2
    assert "SQLite file only" in result.stderr and command[0] in result.stderr
    code, doc = run_json("--db", pg_store, *args)
    assert code == 2 and doc["error"]["code"] == "unsupported_backend"
    assert not (tmp_path / "new.db").exists()


def test_repair_on_a_server_rebuilds_an_invalid_index(pg_store: str) -> None:
    _fill(pg_store)
    engine = engine_mod.open_engine(pg_store)
    sql(engine, "UPDATE pg_index SET indisvalid = false "
                "WHERE indexrelid = 'idx_sessions_source'::regclass")
    result = run("--db", pg_store, "repair", "--check-only")
    assert result.exit_code == 7 and "idx_sessions_source" in result.stdout
    code, doc = run_json("--db", pg_store, "repair")
    assert code == 0 and doc["healthy"]
    assert any("sessions" in a for a in doc["actions"])
    assert sql(engine, "SELECT indisvalid FROM pg_index "
                       "WHERE indexrelid = 'idx_sessions_source'::regclass") == [(True,)]


def test_repair_check_only_is_healthy_on_a_fresh_store_of_either_backend(
        head_store: str) -> None:
    _fill(head_store)
    code, doc = run_json("--db", head_store, "repair", "--check-only")
    assert code == 0 and doc["healthy"] and doc["actions"] == []


def test_current_describes_either_backend(head_store: str, backend: str) -> None:
    code, doc = run_json("--db", head_store, "current")
    assert code == 0 and doc["state"] == "up-to-date"
    assert doc["layout_version"] == ("postgresql" if backend == "postgresql"
                                     else doc["layout_version"])
    assert doc["fts5"] is (backend == "sqlite")


def test_repair_on_a_server_derives_the_cjk_tokens_rows_written_outside_lack(
        pg_store: str) -> None:
    _fill(pg_store)
    engine = engine_mod.open_engine(pg_store)
    sql(engine, "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s1', 'user', '在终端里运行测试', 1700000000)")
    result = run("--db", pg_store, "repair", "--check-only")
    assert result.exit_code == 7 and "1 message without CJK search tokens" in result.stdout
    code, doc = run_json("--db", pg_store, "doctor")
    assert {f["check"]: f["status"] for f in doc["findings"]}["search"] == "warn"
    code, doc = run_json("--db", pg_store, "repair")
    assert code == 0 and doc["healthy"]
    assert doc["actions"] == ["derived the CJK search tokens of 1 message"]
    assert sql(engine, "SELECT count(*) FROM messages WHERE hs_search_cjk IS NULL "
                       "AND role IS DISTINCT FROM 'tool'") == [(0,)]
    with SessionDB(pg_store) as db:
        assert [h["snippet"] for h in db.search_messages("终端")] == ["在>>>终端<<<里运行测试"]
