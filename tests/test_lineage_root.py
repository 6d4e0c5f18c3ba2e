"""Every session carries its lineage root (revision 0023): the write units and triggers keep it,
the revision backfills it, and every lineage walk filters on it in its anchor and its step."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.dialects import postgresql, sqlite

from hermes_store import SessionDB
from hermes_store.db import catalog, migrate
from hermes_store.db import engine as engine_mod
from hermes_store.repo import compression, lineage, session_list
from hermes_store.repo import sessions as sessions_repo
from tests.backends import sql, sql_many

sessions = lineage.sessions
T0 = 1_790_000_000.0
BEFORE_ROOTS = "0022_derived_names_of_our_own"


def roots(location: Any) -> dict[str, str | None]:
    with engine_mod.reading(engine_mod.open_engine(location, readonly=True)) as conn:
        return dict(conn.execute(select(sessions.c.id, sessions.c.root_session_id)).all())


def expected_roots(location: Any) -> dict[str, str]:
    """The topmost existing ancestor of each session, from the parent links in Python."""
    with engine_mod.reading(engine_mod.open_engine(location, readonly=True)) as conn:
        parent = dict(conn.execute(select(sessions.c.id, sessions.c.parent_session_id)).all())
    found = {}
    for sid in parent:
        node, seen = sid, {sid}
        while parent.get(node) in parent and parent[node] not in seen:
            node = parent[node]
            seen.add(node)
        found[sid] = node
    return found


def chain(db: SessionDB, ids: list[str], *, reason: str = "compression") -> None:
    """Sessions each the child of the one before, every one but the last ended ``reason``."""
    for i, sid in enumerate(ids):
        db.create_session(sid, "cli", **({"parent_session_id": ids[i - 1]} if i else {}))
        if i < len(ids) - 1:
            db.end_session(sid, reason)


# --------------------------------------------------------------------------- write units


def test_a_child_created_with_a_parent_carries_the_top_of_the_tree(store: str) -> None:
    with SessionDB(store) as db:
        chain(db, ["a", "b", "c"])
        db.create_session("branch", "cli", parent_session_id="b")
        db.create_session("lone", "cli")
    assert roots(store) == {"a": "a", "b": "a", "c": "a", "branch": "a", "lone": "lone"}


def test_filling_the_parent_of_an_existing_session_moves_its_whole_subtree(store: str) -> None:
    with SessionDB(store) as db:
        chain(db, ["mid", "low", "lower"])
        db.create_session("top", "cli")
        engine_mod.run_write(db.engine, lambda c: sessions_repo.create_or_fill(
            c, "mid", "cli", {"parent_session_id": "top"}, T0))
    assert roots(store) == {"top": "top", "mid": "top", "low": "top", "lower": "top"}


def test_deleting_a_middle_session_makes_each_child_the_root_of_its_subtree(store: str) -> None:
    with SessionDB(store) as db:
        chain(db, ["a", "m", "c", "d"], reason="user_exit")
        db.create_session("c2", "cli", parent_session_id="m")
        assert db.delete_session("m")
    assert roots(store) == {"a": "a", "c": "c", "d": "c", "c2": "c2"}
    assert roots(store) == expected_roots(store)


def test_an_import_links_children_under_existing_and_imported_parents(store: str) -> None:
    with SessionDB(store) as db:
        db.create_session("held", "cli")
        # The grandchild comes first: its parent is linked to "held" only afterwards.
        result = db.import_sessions([
            {"id": "imp_grandchild", "parent_session_id": "imp_child", "messages": []},
            {"id": "imp_child", "parent_session_id": "held", "messages": []},
            {"id": "imp_root", "messages": []},
            {"id": "imp_lost", "parent_session_id": "nowhere", "messages": []},
        ])
        assert result["ok"], result
    assert roots(store) == {"held": "held", "imp_child": "held", "imp_grandchild": "held",
                            "imp_root": "imp_root", "imp_lost": "imp_lost"}


def test_a_copy_keeps_every_root(store: str, tmp_path: Path) -> None:
    from hermes_store.ops import copy as copy_ops

    with SessionDB(store) as db:
        # A child whose id sorts before its parent's: the copy links it before the parent's link.
        chain(db, ["z_top", "m_mid", "a_low"])
    target = tmp_path / "copy.db"
    copy_ops.copy_store(store, str(target))
    assert roots(target) == roots(store) == {"z_top": "z_top", "m_mid": "z_top",
                                             "a_low": "z_top"}


def test_rows_other_programs_insert_get_their_root_from_a_trigger(head_store: str) -> None:
    rows = [{"id": "p", "parent": None}, {"id": "k", "parent": "p"}, {"id": "g", "parent": "k"}]
    sql_many(engine_mod.open_engine(head_store),
             "INSERT INTO sessions (id, source, started_at, parent_session_id) "
             "VALUES (:id, 'cli', 0, :parent)", rows)
    assert roots(head_store) == {"p": "p", "k": "p", "g": "p"}


@pytest.mark.sqlite_only
def test_the_agents_own_insert_and_relink_on_sqlite_keep_roots(head_store: str) -> None:
    con = sqlite3.connect(head_store)  # the agent writes with plain sqlite3, no library
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('root', 'cli', 0)")
        con.execute("INSERT INTO sessions (id, source, started_at, parent_session_id) "
                    "VALUES ('cont', 'cli', 1, 'root')")
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('other', 'cli', 2)")
        con.execute("INSERT INTO sessions (id, source, started_at, parent_session_id) "
                    "VALUES ('other_kid', 'cli', 3, 'other')")
        con.execute("UPDATE sessions SET parent_session_id = 'cont' WHERE id = 'other'")
    con.close()
    assert roots(head_store) == {"root": "root", "cont": "root", "other": "root",
                                 "other_kid": "root"}


# --------------------------------------------------------------------------- the revision


def _legacy_rows() -> list[dict[str, Any]]:
    return [
        {"id": "r", "parent": None}, {"id": "r1", "parent": "r"}, {"id": "r2", "parent": "r1"},
        {"id": "r1b", "parent": "r"}, {"id": "solo", "parent": None},
        {"id": "orphan", "parent": "gone"}, {"id": "orphan_kid", "parent": "orphan"},
    ]


def test_the_revision_backfills_the_root_of_every_session(empty_store: str,
                                                          backend: str) -> None:
    migrate.upgrade(empty_store, BEFORE_ROOTS)
    insert = ("INSERT INTO sessions (id, source, started_at, parent_session_id) "
              "VALUES (:id, 'cli', 0, :parent)")
    if backend == "sqlite":  # as the agent wrote them: plain sqlite3, foreign keys off
        con = sqlite3.connect(empty_store)
        with con:
            con.executemany(insert, _legacy_rows())
        con.close()
    else:  # the row whose parent is gone needs the key out of the way
        eng = engine_mod.open_engine(empty_store)
        sql(eng, "ALTER TABLE sessions DROP CONSTRAINT fk_sessions_parent_session_id_sessions")
        sql_many(eng, insert, _legacy_rows())
    engine_mod.dispose_all()
    migrate.upgrade(empty_store)
    assert roots(empty_store) == {"r": "r", "r1": "r", "r2": "r", "r1b": "r", "solo": "solo",
                                  "orphan": "orphan", "orphan_kid": "orphan"}


def test_the_revision_backfills_the_agents_v11_fixture(legacy_db: Callable[[int], Path]) -> None:
    path = legacy_db(11)
    migrate.upgrade(path)
    got = roots(path)
    assert got == expected_roots(path)
    assert any(sid != root for sid, root in got.items())  # the fixture has lineages


# --------------------------------------------------------------------------- the statements


DIALECTS = {"sqlite": sqlite.dialect(), "postgresql": postgresql.dialect()}


def _compiled(stmt: Any, dialect: str) -> str:
    return str(stmt.compile(dialect=DIALECTS[dialect], compile_kwargs={"literal_binds": True}))


def _recursive_parts(sql_text: str) -> list[tuple[str, str]]:
    """(anchor, recursive member) of each recursive CTE in the statement."""
    parts = []
    for body in re.findall(r"AS\s*\((.*?)\)\s*(?:,\s*\w+\s*\(|,\s*\w+\s+AS|\s*SELECT)",
                           sql_text, flags=re.DOTALL):
        if "UNION ALL" in body:
            anchor, step = body.split("UNION ALL", 1)
            parts.append((anchor, step))
    return parts


SINGLE_LINEAGE: dict[str, Callable[[], Any]] = {
    "ancestors": lambda: lineage.ancestors("s", root="R"),
    "descendants": lambda: lineage.descendants("s", root="R"),
    "compression_chain": lambda: lineage.compression_chain("s", root="R"),
    "compression_tip": lambda: lineage.compression_tip("s", root="R"),
    "compression_root": lambda: lineage.compression_root("s", root="R"),
}
WHOLE_STORE: dict[str, Callable[[], Any]] = {
    "lineage_map": lambda: lineage.lineage_map(),
    "lineage_activity": lambda: lineage.lineage_activity(now=T0, compressed_only=True),
    "v21_chain_map": lambda: select(compression.chain_map(
        select(sessions.c.id, sessions.c.root_session_id), now=T0)),
    "v21_needle_anchors": lambda: session_list.needle_anchors(session_list.id_matches("x")),
}


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("name", sorted(SINGLE_LINEAGE))
def test_each_single_lineage_walk_filters_its_anchor_and_step_on_the_root(
        name: str, dialect: str) -> None:
    parts = _recursive_parts(_compiled(SINGLE_LINEAGE[name](), dialect))
    assert parts, "no recursive CTE found"
    for anchor, step in parts:
        assert re.search(r"\.root_session_id = 'R'", anchor), anchor
        assert re.search(r"\.root_session_id = 'R'", step), step


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("name", sorted(WHOLE_STORE))
def test_each_whole_store_walk_steps_within_the_root(name: str, dialect: str) -> None:
    parts = _recursive_parts(_compiled(WHOLE_STORE[name](), dialect))
    assert parts, "no recursive CTE found"
    for _, step in parts:
        assert re.search(r"\w+\.root_session_id = \w+\.(root_session_id|lineage_root)", step), step


def test_the_tip_step_filters_on_the_root() -> None:
    text = _compiled(select(compression.best_continuation("s", T0, "R")), "postgresql")
    assert "cont.root_session_id = 'R'" in text


# --------------------------------------------------------------------------- the empty check


def test_a_database_holding_only_an_extensions_relations_counts_as_empty(
        pg_empty_store: str) -> None:
    # pg_buffercache puts a view in the current schema, as Citus puts citus_tables in public.
    eng = create_engine(pg_empty_store)
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION pg_buffercache")
    eng.dispose()
    assert migrate.status(pg_empty_store).state == "empty"
    migrate.upgrade(pg_empty_store)
    with engine_mod.reading(engine_mod.open_engine(pg_empty_store, readonly=True)) as conn:
        assert "pg_buffercache" in catalog.extension_members(conn)
        assert "pg_buffercache" not in catalog.relations(conn)
    assert migrate.status(pg_empty_store).state == "up-to-date"
