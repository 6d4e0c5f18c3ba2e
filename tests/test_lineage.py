"""Lineage walks as Core recursive CTEs, checked against hand-written WITH RECURSIVE SQL."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, insert, select, text, update

from hermes_store.db import engine as engine_mod
from hermes_store.db.models import Message
from hermes_store.repo.lineage import (
    SANE_MIN_TS,
    ancestors,
    compression_chain,
    compression_root,
    compression_tip,
    descendants,
    last_activity,
    lineage_activity,
    lineage_map,
    root_of,
    sessions,
)

messages = Message.__table__
T0 = 1_790_000_000.0

# root ─┬─ a (compression chain root → a1 → a2, a2 open)
#       ├─ b ── b1 ── b2
#       └─ c
# lone
TREE = [
    dict(id="root", parent_session_id=None, started_at=T0, ended_at=T0 + 10, end_reason="branched"),
    dict(id="a", parent_session_id="root", started_at=T0 + 20, ended_at=T0 + 30,
         end_reason="compression"),
    dict(id="a1", parent_session_id="a", started_at=T0 + 30, ended_at=T0 + 40,
         end_reason="compression"),
    dict(id="a2", parent_session_id="a1", started_at=T0 + 41, ended_at=None, end_reason=None),
    dict(id="b", parent_session_id="root", started_at=T0 + 50, ended_at=T0 + 60,
         end_reason="user_exit"),
    dict(id="b1", parent_session_id="b", started_at=T0 + 61, ended_at=None, end_reason=None),
    dict(id="b2", parent_session_id="b1", started_at=T0 + 62, ended_at=None, end_reason=None),
    dict(id="c", parent_session_id="root", started_at=T0 + 70, ended_at=None, end_reason=None),
    dict(id="lone", parent_session_id=None, started_at=T0 + 80, ended_at=None, end_reason=None),
]

SEED_ANCESTORS = """
WITH RECURSIVE lineage AS (
    SELECT * FROM sessions WHERE id = :id
    UNION ALL
    SELECT s.* FROM sessions s JOIN lineage l ON s.id = l.parent_session_id
)
SELECT id FROM lineage
"""
SEED_DESCENDANTS = """
WITH RECURSIVE descendants AS (
    SELECT * FROM sessions WHERE id = :id
    UNION ALL
    SELECT s.* FROM sessions s JOIN descendants d ON s.parent_session_id = d.id
)
SELECT id FROM descendants
"""


def _insert(eng: Engine, rows: list[dict]) -> None:
    def unit(conn):
        for row in rows:
            conn.execute(insert(sessions).values(source="cli", **row))

    engine_mod.run_write(eng, unit)


@pytest.fixture
def tree(head_store: str) -> Engine:
    eng = engine_mod.open_engine(head_store)
    _insert(eng, TREE)
    return eng


def _ids(eng: Engine, stmt) -> list[str]:
    with engine_mod.reading(eng) as conn:
        return [r[0] for r in conn.execute(stmt)]


def _walk(eng: Engine, build, session_id: str, **options) -> list[str]:
    """Run a single-lineage walk for the session's stored root, as the repositories do."""
    with engine_mod.reading(eng) as conn:
        root = root_of(conn, session_id)
        if root is None:
            return []
        return [r[0] for r in conn.execute(build(session_id, root=root, **options))]


@pytest.mark.parametrize("start", [row["id"] for row in TREE])
def test_ancestors_match_the_seed_query(tree: Engine, start: str) -> None:
    with engine_mod.reading(tree) as conn:
        expected = [r[0] for r in conn.execute(text(SEED_ANCESTORS), {"id": start})]
    assert _walk(tree, ancestors, start) == expected  # same ids, nearest first


@pytest.mark.parametrize("start", [row["id"] for row in TREE])
def test_descendants_match_the_seed_query(tree: Engine, start: str) -> None:
    with engine_mod.reading(tree) as conn:
        expected = sorted(r[0] for r in conn.execute(text(SEED_DESCENDANTS), {"id": start}))
    assert sorted(_walk(tree, descendants, start)) == expected


def test_walks_report_depths(tree: Engine) -> None:
    with engine_mod.reading(tree) as conn:
        assert conn.execute(ancestors("a2", root="root")).all() == [
            ("a2", "a1", 0), ("a1", "a", 1), ("a", "root", 2), ("root", None, 3)]
        assert [(r.id, r.depth) for r in conn.execute(descendants("b", root="root"))] == [
            ("b", 0), ("b1", 1), ("b2", 2)]


def test_an_unknown_id_gives_no_rows(tree: Engine) -> None:
    assert _walk(tree, ancestors, "nope") == []
    assert _walk(tree, descendants, "nope") == []
    assert _walk(tree, compression_tip, "nope") == []


def test_compression_chain_follows_only_compression_ends(tree: Engine) -> None:
    assert _walk(tree, compression_chain, "a") == ["a", "a1", "a2"]
    assert _walk(tree, compression_chain, "b") == ["b"]  # user_exit: b1 is its own session
    assert _walk(tree, compression_tip, "a") == ["a2"]
    assert _walk(tree, compression_tip, "a1") == ["a2"]
    assert _walk(tree, compression_tip, "c") == ["c"]
    assert _walk(tree, compression_root, "a2") == ["a"]
    assert _walk(tree, compression_root, "b1") == ["b1"]


def test_compression_tip_takes_the_newest_child_started_after_the_end(tree: Engine) -> None:
    _insert(tree, [
        dict(id="a1_sub", parent_session_id="a1", started_at=T0 + 35),  # before a1 ended
        dict(id="a2_late", parent_session_id="a1", started_at=T0 + 45),
    ])
    assert _walk(tree, compression_tip, "a") == ["a2_late"]
    assert _walk(tree, compression_root, "a2") == ["a2"]  # no longer the continuation


def test_lineage_map_groups_every_session_under_its_root(tree: Engine) -> None:
    with engine_mod.reading(tree) as conn:
        rows = {r.id: (r.root_id, r.depth) for r in conn.execute(lineage_map())}
    assert rows["a2"] == ("a", 2) and rows["a1"] == ("a", 1) and rows["a"] == ("a", 0)
    assert rows["b1"] == ("b1", 0) and rows["root"] == ("root", 0)
    assert set(rows) == {row["id"] for row in TREE}


def _make_cycle(eng: Engine) -> None:
    _insert(eng, [
        dict(id="x", parent_session_id=None, started_at=T0, ended_at=T0, end_reason="compression"),
        dict(id="y", parent_session_id="x", started_at=T0, ended_at=T0, end_reason="compression"),
    ])
    engine_mod.run_write(eng, lambda c: c.execute(
        update(sessions).where(sessions.c.id == "x").values(parent_session_id="y")))


def test_a_parent_cycle_in_bad_data_terminates(tree: Engine) -> None:
    _make_cycle(tree)
    assert sorted(_walk(tree, ancestors, "x")) == ["x", "y"]
    assert sorted(_walk(tree, descendants, "y")) == ["x", "y"]
    assert _walk(tree, compression_tip, "x")  # some row, no endless loop
    assert _walk(tree, compression_root, "x")
    with engine_mod.reading(tree) as conn:
        mapped = {r.id for r in conn.execute(lineage_map())}
    assert not {"x", "y"} & mapped  # no root: callers treat each as its own lineage


def test_depth_bound_limits_long_chains(tree: Engine) -> None:
    rows = [dict(id=f"n{i}", parent_session_id=f"n{i - 1}" if i else None, started_at=T0 + i)
            for i in range(10)]
    _insert(tree, rows)
    assert len(_walk(tree, ancestors, "n9", max_depth=3)) == 4


def _add_message(eng: Engine, sid: str, ts: float) -> None:
    engine_mod.run_write(eng, lambda c: c.execute(insert(messages).values(
        session_id=sid, role="user", content="x", timestamp=ts)))


def test_last_activity_is_the_newest_sane_time(tree: Engine) -> None:
    now = T0 + 1000
    _add_message(tree, "b", T0 + 500)
    _add_message(tree, "b", 5e246)            # garbage: far future
    _add_message(tree, "c", 12.0)             # garbage: 1970
    engine_mod.run_write(tree, lambda c: c.execute(
        update(sessions).where(sessions.c.id == "lone").values(last_activity_at=T0 + 900)))
    engine_mod.run_write(tree, lambda c: c.execute(
        update(sessions).where(sessions.c.id == "root").values(last_activity_at=1e300)))
    with engine_mod.reading(tree) as conn:
        got = dict(conn.execute(select(sessions.c.id, last_activity(sessions, now))).all())
    assert got["b"] == T0 + 500
    assert got["c"] == T0 + 70
    assert got["lone"] == T0 + 900
    assert got["root"] == T0


def test_last_activity_falls_back_to_started_at_when_everything_is_garbage(tree: Engine) -> None:
    _insert(tree, [dict(id="bad", parent_session_id=None, started_at=1.0)])
    with engine_mod.reading(tree) as conn:
        got = conn.execute(select(last_activity(sessions, T0)).where(sessions.c.id == "bad"))
        assert got.scalar() == 1.0
    assert SANE_MIN_TS == 946684800.0


def test_lineage_activity_is_the_newest_over_all_segments(tree: Engine) -> None:
    _add_message(tree, "a1", T0 + 600)
    with engine_mod.reading(tree) as conn:
        got = dict(conn.execute(lineage_activity(now=T0 + 1000)).all())
    assert got["a"] == T0 + 600
    assert "a1" not in got


def test_fixture_lineages_are_compression_chains_even_with_skewed_clocks(legacy_db) -> None:
    # The agent's own fixture stores end the parent after creating its child, so the child
    # "started" before the parent's end; the chain must still be recognised.
    from hermes_store import SessionDB

    path = legacy_db(11)
    with SessionDB(path) as db:
        assert db.get_lineage_tip("20260707_060600_e4ca3a") == "20260808_070700_219dc0"
        rows = {r["id"]: r for r in db.list_sessions_rich(limit=100)}
        assert "20260707_060600_e4ca3a" not in rows
        assert rows["20260808_070700_219dc0"]["_lineage_root_id"] == "20260707_060600_e4ca3a"
