"""A store on a hot standby, and a read location beside the primary.

A primary and a standby streaming from it are throwaway clusters (``replica_pair``). On the
standby every read works and every write is the library's read-only error (the CLI's exit 1
with code ``read_only``, never a traceback); ``upgrade`` belongs on the primary; a standby of a
store behind head says so. With a read location, searches and listings go to the standby, and
the writing process reads its own writes even while the standby lags (replay paused)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from backends import ReplicaPair
from cli_support import run, run_json

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.db import migrate
from hermes_store.db.revisions import script_location
from hermes_store.errors import SchemaMismatchError, StoreReadOnlyError, UsageError


def _database(pair: ReplicaPair, revision: str = "head") -> tuple[str, str]:
    name = f"hermes_replica_{uuid.uuid4().hex[:8]}"
    pair.admin.execute(f'CREATE DATABASE "{name}"')
    primary, standby = pair.urls(name)
    migrate.upgrade(primary, revision)
    pair.wait_for_replay()
    return primary, standby


@pytest.fixture
def replicated(replica_pair: ReplicaPair) -> Iterator[tuple[str, str]]:
    """(primary, standby) URLs of a store at head with one searchable session, replayed."""
    primary, standby = _database(replica_pair)
    with SessionDB(primary) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "how do I deploy kubernetes")
        db.set_session_title("s1", "deploying")
    replica_pair.wait_for_replay()
    yield primary, standby
    engine_mod.dispose_all()
    replica_pair.admin.execute(
        f'DROP DATABASE IF EXISTS "{standby.rsplit("/", 1)[1]}" WITH (FORCE)')


@pytest.fixture
def paused(replica_pair: ReplicaPair) -> Iterator[None]:
    """The standby stops replaying (it lags as far as the test likes) until the test ends."""
    with replica_pair.standby_admin() as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
        try:
            yield
        finally:
            standby.execute("SELECT pg_wal_replay_resume()")


def _reads(db: SessionDB) -> list[Any]:
    return [db.get_session("s1")["title"], [m["content"] for m in db.get_messages("s1")],
            [h["session_id"] for h in db.search_messages("kubernetes")],
            [r["id"] for r in db.list_sessions_rich()], db.session_count(),
            db.export_session("s1")["message_count"]]


def test_a_standby_serves_every_read_as_the_primary_does(replicated: tuple[str, str]) -> None:
    primary, standby = replicated
    with SessionDB(primary) as on_primary, SessionDB(standby) as on_standby:
        assert _reads(on_standby) == _reads(on_primary)
    with SessionDB(standby, read_only=True) as read_only:
        assert _reads(read_only)[0] == "deploying"


WRITES: dict[str, Callable[[SessionDB], object]] = {
    "append": lambda db: db.append_message("s1", "user", "more"),
    "create": lambda db: db.create_session("s2", "cli"),
    "title": lambda db: db.set_session_title("s1", "renamed"),
    "prune": lambda db: db.prune_sessions(older_than_days=0),
    "pin": lambda db: db.pin_session("s1"),
    "delete": lambda db: db.delete_session("s1"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_on_a_standby_is_the_read_only_error(replicated: tuple[str, str],
                                                      write: str) -> None:
    _, standby = replicated
    with SessionDB(standby) as db:
        with pytest.raises(StoreReadOnlyError, match="hot standby.*primary") as err:
            WRITES[write](db)
        assert isinstance(err.value, sqlite3.OperationalError)
        assert db.get_session("s1")["title"] == "deploying"


def test_the_cli_on_a_standby_reads_and_refuses_writes_plainly(
        replicated: tuple[str, str]) -> None:
    _, standby = replicated
    code, doc = run_json("--db", standby, "list")
    assert code == 0 and [s["id"] for s in doc["sessions"]] == ["s1"]
    for command in (["pin", "s1"], ["rename", "s1", "other"], ["upgrade"]):
        code, doc = run_json("--db", standby, *command)
        assert (code, doc["error"]["code"]) == (1, "read_only"), command
        assert "primary" in doc["error"]["message"]
    result = run("--db", standby, "pin", "s1")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "hot standby" in result.stderr


def test_upgrade_on_a_standby_says_it_runs_on_the_primary(replicated: tuple[str, str]) -> None:
    _, standby = replicated
    with pytest.raises(StoreReadOnlyError, match="upgrade must run on the primary"):
        migrate.upgrade(standby)


def test_a_standby_of_a_store_behind_head_is_a_clear_error(replica_pair: ReplicaPair) -> None:
    older = ScriptDirectory(script_location()).get_revision("head").down_revision
    primary, standby = _database(replica_pair, str(older))
    try:
        with pytest.raises(SchemaMismatchError, match="upgrade.*on the primary"):
            SessionDB(standby)
        code, doc = run_json("--db", standby, "list")
        assert (code, doc["error"]["code"]) == (6, "schema_mismatch")
    finally:
        engine_mod.dispose_all()
        replica_pair.admin.execute(
            f'DROP DATABASE IF EXISTS "{primary.rsplit("/", 1)[1]}" WITH (FORCE)')


# --------------------------------------------------------------------------- a read location


def test_searches_and_listings_go_to_the_read_location(replicated: tuple[str, str]) -> None:
    primary, standby = replicated
    with SessionDB(primary, read_url=standby) as db:
        assert [h["session_id"] for h in db.search_messages("kubernetes")] == ["s1"]
        assert [r["id"] for r in db.list_sessions_rich()] == ["s1"]
        assert db.session_count() == 1
        assert db._route is not None and db._route.served == {"replica": 3}


def test_the_writing_process_reads_its_writes_while_the_replica_lags(
        replicated: tuple[str, str], replica_pair: ReplicaPair, paused: None) -> None:
    primary, standby = replicated
    with SessionDB(primary, read_url=standby) as db, SessionDB(standby) as replica_only:
        db.append_message("s1", "user", "kubernetes again")
        assert len(db.search_messages("kubernetes")) == 2  # its own write, from the primary
        assert len(replica_only.search_messages("kubernetes")) == 1  # the standby lags
        assert db._route is not None and db._route.served == {"primary": 1}
        with replica_pair.standby_admin() as admin:
            admin.execute("SELECT pg_wal_replay_resume()")
        replica_pair.wait_for_replay()
        assert len(db.search_messages("kubernetes")) == 2
        assert len(db.search_messages("kubernetes")) == 2
        assert db._route.served == {"primary": 1, "replica": 2}


def test_the_read_location_comes_from_the_environment(
        replicated: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    primary, standby = replicated
    monkeypatch.setenv("HERMES_STORE_READ_URL", standby)
    with SessionDB(primary) as db:
        db.search_messages("kubernetes")
        assert db._route is not None and db._route.served == {"replica": 1}


def test_the_cli_reads_from_read_db(replicated: tuple[str, str], replica_pair: ReplicaPair,
                                    paused: None) -> None:
    primary, standby = replicated
    with SessionDB(primary) as db:  # a write the paused standby has not replayed
        db.append_message("s1", "user", "kubernetes in the primary only")
    code, direct = run_json("--db", primary, "search", "kubernetes")
    code_read, replica = run_json("--db", primary, "--read-db", standby, "search", "kubernetes")
    assert (code, code_read) == (0, 0)
    assert direct != replica  # the standby has not replayed the second message yet


def test_a_read_location_needs_a_server_store(tmp_path: Any, replicated: tuple[str, str]) -> None:
    _, standby = replicated
    with pytest.raises(UsageError, match="needs a PostgreSQL store"):
        SessionDB(tmp_path / "state.db", read_url=standby)
