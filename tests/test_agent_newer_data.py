"""The agent's newer data beside ours: prompts it stores once by hash (its schema 25) read back
wherever a prompt is read, and new prompts are stored its way in a file that has its table;
sessions it marks ``hidden`` (schema 31) stay out of the lists unless asked; its expression
index makes no command print an SAWarning.

The agent's reopen of our store is simulated with plain SQL, from the facts in
docs/mixed-fleets.md: it adds ``sessions.system_prompt_hash`` and ``sessions.hidden``, creates
``system_prompts(hash, prompt)`` and ``idx_sessions_effective_activity``.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import PgServer, sql
from cli_support import run, run_json
from sqlalchemy import Engine
from sqlalchemy.exc import SAWarning

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.ops import copy as copying

PROMPT = "You are Hermes, a careful assistant.\n" + "Follow the user's lead. " * 40
OTHER = "You are Hermes, terse today."
_EXPRESSION_INDEX = {
    "sqlite": "CREATE INDEX idx_sessions_effective_activity "
              "ON sessions(COALESCE(last_activity_at, started_at) DESC)",
    "postgresql": "CREATE INDEX idx_sessions_effective_activity "
                  "ON sessions ((COALESCE(last_activity_at, started_at)) DESC)",
}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def agent_reopens(store: str, backend: str) -> Engine:
    """What the agent's open adds to a file of ours (its schema 25 and 31 parts)."""
    SessionDB(store).close()  # our layout first (a server store is at head already)
    engine = engine_mod.open_engine(store)
    for statement in ("ALTER TABLE sessions ADD COLUMN system_prompt_hash TEXT",
                      "ALTER TABLE sessions ADD COLUMN hidden INTEGER DEFAULT 0",
                      "CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL)",
                      _EXPRESSION_INDEX[backend]):
        sql(engine, statement)
    return engine


def agent_session(engine: Engine, session_id: str, *, prompt: str | None = None,
                  hidden: int = 0, started_at: float = 1_790_000_000.0) -> None:
    """A session as the agent writes it: its prompt by hash, ``sessions.system_prompt`` NULL."""
    key = None
    if prompt is not None:
        key = digest(prompt)
        sql(engine, "INSERT INTO system_prompts (hash, prompt) VALUES (:h, :p) "
                    "ON CONFLICT (hash) DO NOTHING", h=key, p=prompt)
    sql(engine, "INSERT INTO sessions (id, source, started_at, system_prompt_hash, hidden) "
                "VALUES (:id, 'cli', :t, :h, :hidden)",
        id=session_id, t=started_at, h=key, hidden=hidden)


def stored(engine: Engine, session_id: str) -> tuple[str | None, str | None]:
    """``(system_prompt, system_prompt_hash)`` as the row holds them."""
    rows = sql(engine, "SELECT system_prompt, system_prompt_hash FROM sessions WHERE id = :id",
               id=session_id)
    return rows[0][0], rows[0][1]


def prompt_rows(engine: Engine) -> dict[str, str]:
    return {r[0]: r[1] for r in sql(engine, "SELECT hash, prompt FROM system_prompts")}


@pytest.fixture
def agent_store(store: str, backend: str) -> Iterator[tuple[str, Engine]]:
    yield store, agent_reopens(store, backend)


# --------------------------------------------------------------------------- prompts, read


def test_a_prompt_the_agent_stored_by_hash_reads_back_through_every_session_read(
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    agent_session(engine, "hashed", prompt=PROMPT)
    with SessionDB(store) as db:
        db.set_session_title("hashed", "By hash")
        assert db.get_session("hashed")["system_prompt"] == PROMPT
        assert db.get_session_by_title("By hash")["system_prompt"] == PROMPT
        assert db.export_session("hashed")["system_prompt"] == PROMPT
        assert [s["system_prompt"] for s in db.export_all()] == [PROMPT]
        assert [s["system_prompt"] for s in db.list_sessions_rich()] == [PROMPT]
        assert [s["system_prompt"] for s in db.search_sessions()] == [PROMPT]


def test_the_cli_shows_and_exports_a_prompt_stored_by_hash(
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    agent_session(engine, "hashed", prompt=PROMPT)
    code, doc = run_json("--db", store, "show", "hashed")
    assert code == 0 and doc["session"]["system_prompt"] == PROMPT
    shown = run("--db", store, "show", "hashed")
    assert "You are Hermes, a careful assistant." in shown.stdout
    exported = run("--db", store, "export", "-", "--session-id", "hashed")
    assert exported.exit_code == 0
    assert json.loads(exported.stdout.splitlines()[0])["system_prompt"] == PROMPT


def test_a_copy_to_the_other_backend_keeps_prompts_stored_by_hash_readable(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest,
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    agent_session(engine, "hashed", prompt=PROMPT)
    if backend == "postgresql":
        target = str(tmp_path / "copy.db")
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        target = server.empty_database()
        request.addfinalizer(lambda: (engine_mod.dispose_all(), server.drop(target)))
    assert copying.copy_store(store, target).verified
    with SessionDB(target) as db:
        assert db.get_session("hashed")["system_prompt"] == PROMPT
        db.create_session("new", "cli", system_prompt=PROMPT)
        assert db.get_session("new")["system_prompt"] == PROMPT
    assert stored(engine_mod.open_engine(target), "new") == (None, digest(PROMPT))


# --------------------------------------------------------------------------- prompts, written


def test_new_prompts_are_stored_the_agents_way_in_a_file_with_its_table(
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    with SessionDB(store) as db:
        db.create_session("mine", "cli", system_prompt=PROMPT)
        db.create_session("twin", "cli", system_prompt=PROMPT)
        assert stored(engine, "mine") == (None, digest(PROMPT))
        assert prompt_rows(engine) == {digest(PROMPT): PROMPT}  # one row for both sessions
        assert db.get_session("twin")["system_prompt"] == PROMPT

        db.create_session("mine", "cli", system_prompt=OTHER)  # fill-only: kept
        assert db.get_session("mine")["system_prompt"] == PROMPT

        db.update_system_prompt("mine", OTHER)
        assert stored(engine, "mine") == (None, digest(OTHER))
        assert db.get_session("mine")["system_prompt"] == OTHER

        db.update_system_prompt("mine", None)
        assert stored(engine, "mine") == (None, None)
        assert db.get_session("mine")["system_prompt"] is None

        db.update_session_billing_route("twin", provider="p", base_url="https://p.example")
        assert stored(engine, "twin") == (None, None)


def test_imported_prompts_are_stored_the_agents_way_too(
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    with SessionDB(store) as db:
        result = db.import_sessions([{"id": "imp", "source": "cli", "system_prompt": PROMPT,
                                      "messages": []}])
        assert result["imported"] == 1
        assert stored(engine, "imp") == (None, digest(PROMPT))
        assert db.get_session("imp")["system_prompt"] == PROMPT


def test_a_store_without_the_agents_table_keeps_prompts_in_the_row(store: str) -> None:
    with SessionDB(store) as db:
        db.create_session("plain", "cli", system_prompt=PROMPT)
        assert sql(db.engine, "SELECT system_prompt FROM sessions")[0][0] == PROMPT
        assert db.get_session("plain")["system_prompt"] == PROMPT


# --------------------------------------------------------------------------- hidden


def test_hidden_sessions_stay_out_of_the_lists_unless_asked(
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    agent_session(engine, "shown", started_at=1_790_000_000.0)
    agent_session(engine, "tucked", hidden=1, started_at=1_790_000_100.0)
    with SessionDB(store) as db:
        assert [s["id"] for s in db.list_sessions_rich()] == ["shown"]
        assert [s["id"] for s in db.list_sessions_rich(order_by_last_active=True)] == ["shown"]
        assert [s["id"] for s in db.list_sessions_rich(include_hidden=True)] == \
            ["tucked", "shown"]
        assert db.session_count(exclude_children=True) == 1
        assert db.session_count() == 2
        assert db.get_session("tucked")["hidden"] == 1  # hidden, not gone
    code, doc = run_json("--db", store, "list")
    assert code == 0 and [s["id"] for s in doc["sessions"]] == ["shown"]
    code, doc = run_json("--db", store, "list", "--all")
    assert code == 0 and {s["id"] for s in doc["sessions"]} == {"shown", "tucked"}


# --------------------------------------------------------------------------- warnings


def test_no_command_warns_about_the_agents_expression_index(
        agent_store: tuple[str, Engine]) -> None:
    store, engine = agent_store
    agent_session(engine, "hashed", prompt=PROMPT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for argv in (("upgrade",), ("check",), ("list",), ("show", "hashed"),
                     ("export", "-"), ("doctor",), ("stats",)):
            result = run("--db", store, *argv)
            assert result.exit_code in (0, 1), (argv, result.stderr)
            assert "SAWarning" not in result.stderr, argv
        with SessionDB(store) as db:
            db.list_sessions_rich()
    assert [str(w.message) for w in caught if issubclass(w.category, SAWarning)] == []
