"""SessionDB construction, closing, compatibility hooks, session ids and session lifecycle."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import threading
from pathlib import Path

import pytest
from backends import holding_write_lock

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.errors import SchemaMismatchError, StoreNotFoundError


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        yield instance


# --------------------------------------------------------------------------- construction


def test_default_path_is_hermes_home_resolved_at_construction(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "first"))
    with SessionDB() as db:
        monkeypatch.setenv("HERMES_HOME", str(tmp_path / "second"))
        db.create_session("s1", "cli")
        assert db.db_path == tmp_path / "first" / "state.db"
    assert (tmp_path / "first" / "state.db").is_file()
    assert not (tmp_path / "second").exists()


def test_empty_hermes_home_falls_back_to_the_home_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HERMES_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with SessionDB() as db:
        assert db.db_path == tmp_path / "home" / ".hermes" / "state.db"
    assert db.db_path.is_file()


def test_a_str_path_works_and_parent_directories_are_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.db"
    with SessionDB(str(target)) as db:
        db.create_session("s1", "cli")
    assert target.is_file()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_new_store_is_created_at_head(empty_store: str) -> None:
    assert migrate.status(empty_store).state in ("missing", "empty")
    SessionDB(empty_store).close()
    assert migrate.status(empty_store).at_head


@pytest.mark.parametrize("version", [1, 6, 11, 21])
def test_a_legacy_store_is_upgraded_on_open_and_keeps_its_sessions(legacy_db, version) -> None:
    path = legacy_db(version)
    with SessionDB(path) as db:
        assert db.session_count() == 16
        assert migrate.status(path).at_head


def test_opening_a_current_store_writes_nothing(head_store: str) -> None:
    # Another connection holds the write lock: any write on open would fail or wait.
    with holding_write_lock(head_store), SessionDB(head_store) as db:
        assert db.session_count() == 0


def test_readonly_open_refuses_a_store_behind_head(legacy_db) -> None:
    path = legacy_db(11)
    with pytest.raises(SchemaMismatchError) as err:
        SessionDB(path, readonly=True)
    assert isinstance(err.value, sqlite3.OperationalError)
    assert "upgrade" in str(err.value)
    assert not migrate.status(path).at_head


def test_readonly_open_of_a_missing_store_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        SessionDB(tmp_path / "nowhere" / "state.db", readonly=True)
    assert not (tmp_path / "nowhere").exists()


def test_readonly_open_reads_a_current_store(head_store: str) -> None:
    with SessionDB(head_store) as db:
        db.create_session("s1", "cli")
    with SessionDB(head_store, readonly=True) as ro:
        assert ro.get_session("s1")["source"] == "cli"


def test_a_file_that_is_not_a_database_fails_to_open(tmp_path: Path) -> None:
    bogus = tmp_path / "state.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        SessionDB(bogus)


def test_a_foreign_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE stuff (x)")
    conn.commit()
    conn.close()
    with pytest.raises(sqlite3.OperationalError):
        SessionDB(path)
    names = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert names == {"stuff"}


@pytest.mark.sqlite_only
def test_connections_use_the_documented_pragmas(db: SessionDB) -> None:
    conn = db._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1000
    assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 64 * 1024 * 1024


@pytest.mark.sqlite_only
def test_the_store_and_its_wal_are_private_to_the_user(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    wal = Path(str(db.db_path) + "-wal")
    assert wal.exists()
    for path in (db.db_path, wal):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- closing


def test_context_manager_returns_the_instance_and_closes(store: str) -> None:
    with SessionDB(store) as db:
        assert isinstance(db, SessionDB)
    with pytest.raises(sqlite3.ProgrammingError, match="Cannot operate on a closed database."):
        db.session_count()


def test_context_manager_never_swallows_exceptions(store: str) -> None:
    with pytest.raises(KeyError), SessionDB(store):
        raise KeyError("boom")


def test_close_is_idempotent(store: str) -> None:
    db = SessionDB(store)
    db.close()
    db.close()


@pytest.mark.parametrize("call", [
    lambda db: db.create_session("s", "cli"),
    lambda db: db.get_session("s"),
    lambda db: db.append_message("s", "user", "x"),
    lambda db: db.list_sessions_rich(),
    lambda db: db.prune_sessions(),
    lambda db: db.set_meta("k", "v"),
    lambda db: db._conn,
    lambda db: db._execute_write(lambda c: None),
])
def test_every_call_after_close_raises_programming_error(store: str, call) -> None:
    db = SessionDB(store)
    db.close()
    with pytest.raises(sqlite3.ProgrammingError, match=r"^Cannot operate on a closed database\.$"):
        call(db)


def test_two_instances_on_one_store_share_the_engine(store: str) -> None:
    with SessionDB(store) as a, SessionDB(store) as b:
        assert a.engine is b.engine
        a.create_session("s1", "cli")
        assert b.get_session("s1") is not None


# --------------------------------------------------------------------------- compat hooks


@pytest.mark.sqlite_only
def test_raw_connection_hook_is_autocommit_with_row_factory(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    conn = db._conn
    assert isinstance(conn, sqlite3.Connection)
    row = conn.execute("SELECT id, source FROM sessions").fetchone()
    assert row["id"] == "s1" and row["source"] == "cli"
    conn.execute("UPDATE sessions SET title = 'raw' WHERE id = 's1'")
    assert not conn.in_transaction
    assert db.get_session_title("s1") == "raw"


@pytest.mark.sqlite_only
def test_execute_write_runs_one_transaction_and_returns_its_result(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    got = db._execute_write(lambda c: c.execute(
        "UPDATE sessions SET title = 't' WHERE id = ?", ("s1",)).rowcount)
    assert got == 1 and db.get_session_title("s1") == "t"

    def failing(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE sessions SET title = 'lost' WHERE id = 's1'")
        raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        db._execute_write(failing)
    assert db.get_session_title("s1") == "t"


def test_static_hooks_and_constants() -> None:
    assert SessionDB._sanitize_fts5_query("hello AND") == "hello"
    assert SessionDB._sanitize_fts5_query("chat-send") == '"chat-send"'
    assert SessionDB._contains_cjk("记忆") and not SessionDB._contains_cjk("abc")
    assert SessionDB.MAX_TITLE_LENGTH == 100
    assert SessionDB._WRITE_MAX_RETRIES == 15
    assert (SessionDB._WRITE_RETRY_MIN_S, SessionDB._WRITE_RETRY_MAX_S) == (0.020, 0.150)
    assert SessionDB._CHECKPOINT_EVERY_N_WRITES == 50


def test_an_instance_may_be_shared_by_threads(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(20):
                db.append_message("s1", "user", f"t{n}-{i}")
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert db.get_session("s1")["message_count"] == 80 == db.message_count("s1")


def test_an_exhausted_lock_budget_raises_operational_error(db: SessionDB, monkeypatch) -> None:
    db.create_session("s1", "cli")
    monkeypatch.setattr(engine_mod, "WRITE_BUDGET_S", 0.3)
    with holding_write_lock(db.location), \
            pytest.raises(sqlite3.OperationalError, match="database is locked"):
        db.end_session("s1", "user_exit")
    assert db.get_session("s1")["ended_at"] is None


def test_reads_never_wait_for_the_write_lock(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    with holding_write_lock(db.location) as execute:
        execute("UPDATE sessions SET title = 'uncommitted'")
        assert db.get_session("s1")["title"] is None
        assert db.list_sessions_rich()[0]["id"] == "s1"


def test_creates_and_appends_get_the_long_budget_other_writes_the_short(db, monkeypatch) -> None:
    budgets: list[tuple[str, float]] = []
    real = engine_mod.run_write

    def spy(eng, fn, *, budget, what, **kw):
        budgets.append((what, budget))
        return real(eng, fn, budget=budget, what=what, **kw)

    monkeypatch.setattr(engine_mod, "run_write", spy)
    db.create_session("s1", "cli")
    db.ensure_session("s1")
    db.append_message("s1", "user", "x")
    db.end_session("s1", "done")
    db.set_session_title("s1", "t")
    assert budgets == [("create_session", 60.0), ("create_session", 60.0),
                       ("append_message", 60.0), ("end_session", 20.0),
                       ("set_session_title", 20.0)]


# --------------------------------------------------------------------------- ids


@pytest.mark.parametrize("sid", ["20260802_120000_fff666", "20260915_074937_3cf8aa23",
                                 "cron_backup_20260915_030000", "x", "with space", "中文"])
def test_every_producer_id_shape_is_accepted(db: SessionDB, sid: str) -> None:
    assert db.create_session(sid, "cli") == sid
    assert db.get_session(sid)["id"] == sid


def test_new_session_id_has_the_cli_shape(db: SessionDB) -> None:
    from hermes_store.repo.sessions import new_session_id

    sid = new_session_id()
    assert re.fullmatch(r"\d{8}_\d{6}_[0-9a-f]{6}", sid)
    assert db.create_session(sid, "cli") == sid and new_session_id() != sid


def test_empty_id_is_a_value_error_and_non_str_a_type_error(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.create_session("", "cli")
    with pytest.raises(TypeError):
        db.create_session(42, "cli")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        db.ensure_session("")
    assert db.session_count() == 0


# --------------------------------------------------------------------------- create / ensure


def test_create_session_sets_the_documented_defaults(db: SessionDB) -> None:
    before = __import__("time").time()
    db.create_session("s1", "cli", model="m", model_config={"temp": 0.5, "名": "值"},
                      system_prompt="You are…", user_id="u1")
    row = db.get_session("s1")
    assert isinstance(row["started_at"], float) and row["started_at"] >= before
    assert (row["ended_at"], row["end_reason"], row["title"]) == (None, None, None)
    assert row["message_count"] == row["tool_call_count"] == row["input_tokens"] == 0
    assert row["model_config"] == '{"temp": 0.5, "名": "值"}'  # JSON text, non-ASCII as is
    assert json.loads(row["model_config"]) == {"temp": 0.5, "名": "值"}
    assert (row["system_prompt"], row["user_id"]) == ("You are…", "u1")


def test_falsy_model_config_is_stored_as_null(db: SessionDB) -> None:
    db.create_session("s1", "cli", model_config={})
    assert db.get_session("s1")["model_config"] is None


def test_create_twice_keeps_the_first_values(db: SessionDB) -> None:
    db.create_session("s1", "cli", model="m")
    started = db.get_session("s1")["started_at"]
    db.create_session("s1", "gateway", model="m2")
    row = db.get_session("s1")
    assert (row["source"], row["model"], row["started_at"]) == ("cli", "m", started)
    assert db.session_count() == 1


def test_create_fills_null_columns_and_replaces_only_the_placeholder_source(db: SessionDB) -> None:
    db.update_token_counts("g", input_tokens=5)
    row = db.get_session("g")
    assert (row["source"], row["model"]) == ("unknown", None)
    db.create_session("g", "telegram", model="m", user_id="u")
    row = db.get_session("g")
    assert (row["source"], row["model"], row["user_id"], row["input_tokens"]) == (
        "telegram", "m", "u", 5)


def test_create_accepts_newer_columns_and_rejects_unknown_keywords(db: SessionDB) -> None:
    db.create_session("s1", "cli", cwd="/home/ana/app", git_branch="main")
    assert db.get_session("s1")["cwd"] == "/home/ana/app"
    with pytest.raises(TypeError, match="bogus"):
        db.create_session("s2", "cli", bogus=1)
    assert db.get_session("s2") is None


def test_unknown_parent_is_an_integrity_error_and_writes_nothing(db: SessionDB) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        db.create_session("child", "cli", parent_session_id="missing")
    assert db.get_session("child") is None
    db.create_session("p", "cli")
    db.create_session("child", "cli", parent_session_id="p")
    assert db.get_session("child")["parent_session_id"] == "p"


def test_ensure_session_behaves_like_create(db: SessionDB) -> None:
    assert db.ensure_session("s1") == "s1"
    assert db.get_session("s1")["source"] == "unknown"
    db.ensure_session("s1", "cli", model="m")
    row = db.get_session("s1")
    assert (row["source"], row["model"]) == ("cli", "m")
    db.append_message("s1", "user", "hi")  # the row exists for a following append


# --------------------------------------------------------------------------- get_session


def test_get_session_returns_every_documented_key(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    row = db.get_session("s1")
    documented = {"id", "source", "user_id", "model", "model_config", "system_prompt",
                  "parent_session_id", "started_at", "ended_at", "end_reason", "title",
                  "message_count", "tool_call_count", "api_call_count", "input_tokens",
                  "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                  "billing_provider", "billing_base_url", "billing_mode", "estimated_cost_usd",
                  "actual_cost_usd", "cost_status", "cost_source", "pricing_version",
                  "handoff_state", "handoff_platform", "handoff_error"}
    assert documented <= set(row)
    assert db.get_session("missing") is None


def test_get_session_returns_columns_only_an_adopted_store_has(legacy_db) -> None:
    with SessionDB(legacy_db(21)) as db:
        row = db.get_session("20260808_070700_219dc0")
    assert {"session_key", "chat_id", "rewind_count", "compression_fallback_streak"} <= set(row)
    assert len(row["system_prompt"]) == 1231


def test_system_prompt_comes_back_in_full(db: SessionDB) -> None:
    prompt = "You are Hermes. " * 1100  # ~17 KB
    db.create_session("a", "cli", system_prompt=prompt)
    db.create_session("b", "cli", system_prompt=prompt)
    assert db.get_session("a")["system_prompt"] == prompt == db.get_session("b")["system_prompt"]


# --------------------------------------------------------------------------- resolve ids


def test_resolve_session_id_by_exact_id_or_unique_prefix(db: SessionDB) -> None:
    for sid in ("20260802_120000_fff666", "20260802_120000_abc123", "20260803_090000_aaaaaa"):
        db.create_session(sid, "cli")
    assert db.resolve_session_id("20260803") == "20260803_090000_aaaaaa"
    assert db.resolve_session_id("20260802_12") is None
    assert db.resolve_session_id("x") is None
    assert db.resolve_session_id("20260802_120000_abc123") == "20260802_120000_abc123"
    assert db.resolve_session_id("  20260803  ") == "20260803_090000_aaaaaa"
    assert db.resolve_session_id("") is None and db.resolve_session_id("   ") is None


def test_resolve_session_id_treats_wildcards_literally_and_is_case_sensitive(db) -> None:
    db.create_session("abc_def", "cli")
    db.create_session("abcXdef", "cli")
    db.create_session("Upper", "cli")
    assert db.resolve_session_id("abc_") == "abc_def"
    assert db.resolve_session_id("abc%") is None
    assert db.resolve_session_id("a\\") is None
    assert db.resolve_session_id("upper") is None
    assert db.resolve_session_id("Up") == "Upper"


def test_an_exact_id_wins_over_longer_ids_it_prefixes(db: SessionDB) -> None:
    db.create_session("abc", "cli")
    db.create_session("abcd", "cli")
    assert db.resolve_session_id("abc") == "abc"


# --------------------------------------------------------------------------- end / reopen


def test_the_first_end_wins(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.end_session("s1", "compression")
    first = db.get_session("s1")["ended_at"]
    db.end_session("s1", "user_exit")
    row = db.get_session("s1")
    assert (row["end_reason"], row["ended_at"]) == ("compression", first)


def test_reopen_clears_the_end_so_a_new_end_applies(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.end_session("s1", "user_exit")
    db.reopen_session("s1")
    row = db.get_session("s1")
    assert (row["ended_at"], row["end_reason"]) == (None, None)
    db.reopen_session("s1")  # still open: no-op
    db.end_session("s1", "timeout")
    assert db.get_session("s1")["end_reason"] == "timeout"


def test_unknown_ids_are_silent_no_ops_for_lifecycle_writes(db: SessionDB) -> None:
    db.end_session("nope", "x")
    db.reopen_session("nope")
    db.update_system_prompt("nope", "p")
    db.clear_messages("nope")
    assert db.session_count() == 0


def test_update_system_prompt_replaces_and_none_clears(db: SessionDB) -> None:
    db.create_session("s1", "cli", system_prompt="old")
    db.update_system_prompt("s1", "new")
    assert db.get_session("s1")["system_prompt"] == "new"
    db.update_system_prompt("s1", None)
    assert db.get_session("s1")["system_prompt"] is None


# --------------------------------------------------------------------------- token counts


def test_token_counts_add_up_by_default(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    for _ in range(2):
        db.update_token_counts("s1", input_tokens=10, output_tokens=5, cache_read_tokens=1,
                               cache_write_tokens=2, reasoning_tokens=3, estimated_cost_usd=0.5,
                               actual_cost_usd=0.25, api_call_count=1)
    row = db.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"],
            row["cache_write_tokens"], row["reasoning_tokens"]) == (20, 10, 2, 4, 6)
    assert (row["estimated_cost_usd"], row["actual_cost_usd"], row["api_call_count"]) == (
        1.0, 0.5, 2)


def test_incremental_costs_follow_the_table(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.update_token_counts("s1")
    row = db.get_session("s1")
    assert row["estimated_cost_usd"] == 0.0  # (old or 0) + (value or 0)
    assert row["actual_cost_usd"] is None  # None → unchanged
    db.update_token_counts("s1", api_call_count=None)
    assert db.get_session("s1")["api_call_count"] == 0


def test_absolute_mode_sets_values_and_leaves_none_unchanged(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    db.update_token_counts("s1", input_tokens=100, estimated_cost_usd=2.0, actual_cost_usd=1.0,
                           api_call_count=7)
    db.update_token_counts("s1", input_tokens=40, output_tokens=3, absolute=True)
    row = db.get_session("s1")
    assert (row["input_tokens"], row["output_tokens"]) == (40, 3)
    assert (row["estimated_cost_usd"], row["actual_cost_usd"], row["api_call_count"]) == (
        2.0, 1.0, 7)
    db.update_token_counts("s1", estimated_cost_usd=0.75, actual_cost_usd=0.5,
                           api_call_count=2, absolute=True)
    row = db.get_session("s1")
    assert (row["estimated_cost_usd"], row["actual_cost_usd"], row["api_call_count"]) == (
        0.75, 0.5, 2)


def test_billing_columns_and_model_keep_their_first_value(db: SessionDB) -> None:
    # v21 (docs/v21.md#behaviour-changes): only accounted calls fill the route, and the first
    # accounted call replaces a requested one, so both calls here account an API call.
    db.update_token_counts("s1", model="m1", billing_provider="openrouter",
                           billing_base_url="https://a", billing_mode="api",
                           cost_status="estimated", cost_source="table", pricing_version="v1",
                           api_call_count=1)
    db.update_token_counts("s1", model="m2", billing_provider="other", billing_base_url="b",
                           billing_mode="sub", cost_status="final", cost_source=None,
                           pricing_version="v2", api_call_count=1)
    row = db.get_session("s1")
    assert (row["source"], row["model"], row["billing_provider"], row["billing_base_url"],
            row["billing_mode"]) == ("unknown", "m1", "openrouter", "https://a", "api")
    assert (row["cost_status"], row["cost_source"], row["pricing_version"]) == (
        "final", "table", "v2")


def test_token_update_for_a_missing_row_creates_it_in_the_same_transaction(db) -> None:
    db.update_token_counts("new", input_tokens=3, model="m")
    row = db.get_session("new")
    assert (row["source"], row["model"], row["input_tokens"]) == ("unknown", "m", 3)
    assert db.db_path is None or os.path.exists(db.db_path)


# --------------------------------------------------------------------------- lineage tip


def test_resume_target_is_the_tip_of_the_compression_lineage(db: SessionDB) -> None:
    db.create_session("first", "cli")
    db.end_session("first", "compression")
    db.create_session("second", "cli", parent_session_id="first")
    db.end_session("second", "compression")
    db.create_session("third", "cli", parent_session_id="second")
    db.create_session("side", "subagent", parent_session_id="third")
    assert [db.get_lineage_tip(s) for s in ("first", "second", "third")] == ["third"] * 3
    assert db.get_lineage_tip("side") == "side"
    assert db.get_lineage_tip("ghost") is None
