"""The agent people run today (schema 30 and 31) sharing ``state.db`` with us: its files adopt
losslessly, its reopen adds its own objects beside ours, its stale path no longer touches ours,
and triggers of ours that go missing are drift that ``check``/``doctor`` report and an open or
``repair`` restores (docs/mixed-fleets.md#the-agent-today).

The files come from tests/agent_today.py (written from the facts, not the agent's code); its CJK
objects use unicode61 in place of the native tokenizer here (test_agent_tokenizer.py loads a real
library).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from agent_today import SIX_TRIGGERS, build, reopen, stale_path
from cli_support import run, run_json

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate

AGENT_TABLES = ("sessions", "messages", "system_prompts", "session_model_usage", "state_meta",
                "gateway_routing", "gateway_hygiene_state", "gateway_heartbeats",
                "conversation_generations", "compression_locks", "session_turn_leases",
                "async_delegations")
OUR_INDEXES = ("hs_fts", "hs_fts_trigram", "hs_fts_cjk")


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _cells(path: Path) -> dict[str, list[tuple]]:
    """Every row of the agent's tables, with every column the agent wrote."""
    con = _connect(path)
    try:
        out = {}
        for table in AGENT_TABLES:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            out[table] = sorted(con.execute(f"SELECT {', '.join(cols)} FROM {table}"),
                                key=repr)
        return out
    finally:
        con.close()


def _agent_columns(path: Path) -> dict[str, list[str]]:
    con = _connect(path)
    try:
        return {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in AGENT_TABLES}
    finally:
        con.close()


def _fts5_commands(path: Path) -> None:
    con = _connect(path)
    try:
        for t in OUR_INDEXES:
            for stmt in (f"INSERT INTO {t} ({t}) VALUES ('rebuild')",
                         f"INSERT INTO {t} ({t}) VALUES ('integrity-check')",
                         f"INSERT INTO {t} ({t}, rank) VALUES ('integrity-check', 1)",
                         f"INSERT INTO {t} ({t}) VALUES ('optimize')",
                         f"INSERT INTO {t} ({t}, rank) VALUES ('merge', 16)"):
                con.execute(stmt)
    finally:
        con.close()


def _ids(path: Path, term: str) -> set[int]:
    with SessionDB(path) as db:
        return {h["id"] for h in db.search_messages(term)}


def _adopted(tmp_path: Path, version: int) -> Path:
    path = build(tmp_path / f"state-{version}.db", version)
    assert migrate.upgrade(path).at_head
    engine_mod.dispose_all()
    return path


@pytest.mark.sqlite_only
@pytest.mark.parametrize("version", [30, 31])
def test_a_schema_30_or_31_file_upgrades_losslessly(tmp_path: Path, version: int) -> None:
    path = build(tmp_path / "state.db", version)
    before, columns = _cells(path), _agent_columns(path)
    assert migrate.upgrade(path).at_head
    after_columns = _agent_columns(path)
    con = _connect(path)
    try:
        for table, cols in columns.items():
            assert after_columns[table][:len(cols)] == cols or set(cols) <= set(after_columns[table])
            rows = sorted(con.execute(f"SELECT {', '.join(cols)} FROM {table}"), key=repr)
            if table == "state_meta":  # our derived flags (hs_…) join the agent's keys
                rows = [r for r in rows if not str(r[0]).startswith("hs_")]
            assert rows == before[table], table
    finally:
        con.close()
    assert migrate.check(path) == []
    _fts5_commands(path)
    assert _ids(path, "kubernetes") and _ids(path, "日志") and _ids(path, "ログ")


@pytest.mark.sqlite_only
@pytest.mark.parametrize("version", [30, 31])
def test_the_agents_reopen_with_its_cjk_objects_leaves_every_write_working(
        tmp_path: Path, version: int) -> None:
    path = _adopted(tmp_path, version)
    con = _connect(path)
    reopen(con, cjk="unicode61")  # its CJK objects, unicode61 standing in for its tokenizer
    con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('cli-1', 'user', 'plainagentword 通信 from the agent', ?)", (time.time(),))
    con.close()
    with SessionDB(path) as db:
        ours = db.append_message("cli-1", "user", "libraryword 漢字 through hermes_store")
        assert {h["id"] for h in db.search_messages("plainagentword")} != set()
        assert {h["id"] for h in db.search_messages("libraryword")} == {ours}
        assert len(db.search_messages("通信")) == 1 and len(db.search_messages("漢字")) == 1
    _fts5_commands(path)
    assert migrate.check(path) == []


@pytest.mark.sqlite_only
def test_the_agents_stale_path_no_longer_touches_our_triggers(tmp_path: Path) -> None:
    path = _adopted(tmp_path, 31)
    con = _connect(path)
    reopen(con)
    con.execute("INSERT INTO state_meta (key, value) VALUES ('fts_stale', '1')")
    stale_path(con)
    con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('cli-1', 'user', 'afterstale words', ?)", (time.time(),))
    con.close()
    assert migrate.check(path) == []
    assert len(_ids(path, "afterstale")) == 1


def _drop_our_triggers(path: Path) -> list[str]:
    """What the agent's stale path did to a store before revision 0022 (its six names were
    ours): our word and trigram triggers gone."""
    con = _connect(path)
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' "
            "AND (name GLOB 'hs_fts_[ab][diu]' OR name GLOB 'hs_fts_trigram_[ab][diu]')")]
        for name in names:
            con.execute(f'DROP TRIGGER "{name}"')
        con.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('cli-1', 'user', 'meanwhileword written unindexed', ?)",
                    (time.time(),))
        return sorted(names)
    finally:
        con.close()


@pytest.mark.sqlite_only
def test_missing_triggers_are_drift_and_repair_indexes_what_was_written_meanwhile(
        tmp_path: Path) -> None:
    path = _adopted(tmp_path, 31)
    dropped = _drop_our_triggers(path)
    assert len(dropped) == 8 and len(SIX_TRIGGERS) == 6

    checked = run("--db", str(path), "check")
    assert checked.exit_code != 0
    assert all(name in checked.stdout for name in dropped)
    code, doctor = run_json("--db", str(path), "doctor")
    assert code != 0
    finding = next(f for f in doctor["findings"] if f["check"] == "search_layout")
    assert finding["status"] == "damage" and all(n in finding["detail"] for n in dropped)

    assert run("--db", str(path), "repair").exit_code == 0
    engine_mod.dispose_all()
    con = _connect(path)
    hits = con.execute("SELECT count(*) FROM hs_fts WHERE hs_fts MATCH 'meanwhileword'")
    assert hits.fetchone()[0] == 1
    con.close()
    assert run("--db", str(path), "check").exit_code == 0
    _fts5_commands(path)


@pytest.mark.sqlite_only
def test_a_write_open_restores_missing_triggers_and_indexes_the_gap(tmp_path: Path) -> None:
    path = _adopted(tmp_path, 30)
    _drop_our_triggers(path)
    with SessionDB(path) as db:  # a read-write open puts them back
        db.append_message("cli-1", "user", "afterwards word")
    con = _connect(path)
    for term in ("meanwhileword", "afterwards"):
        hits = con.execute("SELECT count(*) FROM hs_fts WHERE hs_fts MATCH ?", (term,))
        assert hits.fetchone()[0] == 1, term
    con.close()
    assert migrate.check(path) == []


def test_an_adopted_agent_file_copied_to_postgresql_finds_the_same(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # PostgreSQL has no agent beside it; what applies there is the adopted data and its search.
    from hermes_store.ops import copy as copying

    path = _adopted(tmp_path, 31)
    server = request.getfixturevalue("pg_server")
    url = server.empty_database()
    request.addfinalizer(lambda: (engine_mod.dispose_all(), server.drop(url)))
    assert copying.copy_store(str(path), url).verified
    for term in ("kubernetes", "日志", "ログ", "tailword"):
        assert _ids(path, term) == _ids(url, term), term
