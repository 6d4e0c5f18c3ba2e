"""SessionDB listing: previews, last activity, visibility, compression projection, order, counts;
and the seed's "recent sessions" and "token usage" queries."""

from __future__ import annotations

import pytest
from backends import sql

from hermes_store import SessionDB
from hermes_store.db import engine as engine_mod
from hermes_store.repo import listing as queries

T = 1_790_000_000.0


@pytest.fixture
def db(store: str):
    with SessionDB(store) as instance:
        yield instance


def make(db: SessionDB, sid: str, started: float, *, source: str = "cli",
         parent: str | None = None, ended: float | None = None, reason: str | None = None,
         title: str | None = None, **kw) -> None:
    db.create_session(sid, source, parent_session_id=parent, **kw)
    if title is not None:
        db.set_session_title(sid, title)
    sql(db, "UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r WHERE id = :id",
        s=started, e=ended, r=reason, id=sid)


def ids(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows]


# --------------------------------------------------------------------------- preview


def test_preview_is_the_first_user_message_cleaned_and_cut(db: SessionDB) -> None:
    make(db, "s1", T)
    db.append_message("s1", "system", "not me", timestamp=T)
    db.append_message("s1", "user", "  second\r\nline  " + "x" * 80, timestamp=T + 2)
    db.append_message("s1", "user", None, timestamp=T + 0.5)
    db.append_message("s1", "user", "  first\r\nline  ", timestamp=T + 1)
    row = db.list_sessions_rich()[0]
    assert row["preview"] == "first  line"


def test_a_long_preview_is_60_characters_plus_an_ellipsis(db: SessionDB) -> None:
    make(db, "s1", T)
    db.append_message("s1", "user", "a" * 70)
    assert db.list_sessions_rich()[0]["preview"] == "a" * 60 + "..."
    make(db, "s2", T - 1)
    db.append_message("s2", "user", "b" * 60)
    assert db.list_sessions_rich()[1]["preview"] == "b" * 60


def test_preview_of_multimodal_content_shows_text_parts_only(db: SessionDB) -> None:
    make(db, "s1", T)
    db.append_message("s1", "user", [{"type": "image_url", "image_url": {"url": "data:..."}},
                                     {"type": "text", "text": "what is this?"}])
    assert db.list_sessions_rich()[0]["preview"] == "what is this?"


def test_preview_of_long_multimodal_content_is_read_whole(db: SessionDB) -> None:
    # Longer than the plain-text fetch: cut short, the stored JSON would not parse.
    make(db, "s1", T)
    db.append_message("s1", "user", [{"type": "image_url", "image_url": {"url": "x" * 2000}},
                                     {"type": "text", "text": "and this one?"}])
    assert db.list_sessions_rich()[0]["preview"] == "and this one?"


def test_no_user_message_gives_an_empty_preview(db: SessionDB) -> None:
    make(db, "s1", T)
    db.append_message("s1", "assistant", "hello")
    assert db.list_sessions_rich()[0]["preview"] == ""


def test_last_active_is_the_newest_message_else_started_at(db: SessionDB) -> None:
    make(db, "quiet", T)
    make(db, "busy", T - 10)
    db.append_message("busy", "user", "x", timestamp=T + 50)
    db.append_message("busy", "user", "y", timestamp=T + 20)
    rows = {r["id"]: r for r in db.list_sessions_rich()}
    assert rows["quiet"]["last_active"] == T and rows["busy"]["last_active"] == T + 50


def test_a_garbage_timestamp_never_makes_a_session_look_recent(db: SessionDB) -> None:
    make(db, "s1", T)
    db.append_message("s1", "user", "x", timestamp=T + 5)
    db.append_message("s1", "user", "y", timestamp=5e246)
    assert db.list_sessions_rich()[0]["last_active"] == T + 5


# --------------------------------------------------------------------------- visibility


@pytest.fixture
def family(db: SessionDB) -> SessionDB:
    make(db, "root", T, ended=T + 10, reason="branched")
    make(db, "branch", T + 11, parent="root")
    make(db, "early_kid", T + 5, parent="root")           # started before the branch point
    make(db, "main", T + 100, ended=T + 110, reason="compression", title="main chat")
    make(db, "main2", T + 110, parent="main", ended=T + 120, reason="compression")
    make(db, "main3", T + 120, parent="main2", title=None, model="tip-model")
    make(db, "agent", T + 200, ended=T + 300, reason="user_exit")
    make(db, "sub", T + 210, parent="agent", source="subagent")
    db.append_message("main", "user", "first segment", timestamp=T + 101)
    db.append_message("main3", "user", "tip segment", timestamp=T + 121)
    db.append_message("main3", "assistant", "latest", timestamp=T + 500)
    return db


def test_roots_and_branch_children_are_visible_by_default(family: SessionDB) -> None:
    assert ids(family.list_sessions_rich()) == ["agent", "main3", "branch", "root"]


def test_include_children_lists_every_session_unprojected(family: SessionDB) -> None:
    rows = family.list_sessions_rich(include_children=True)
    assert ids(rows) == ["sub", "agent", "main3", "main2", "main", "branch", "early_kid", "root"]
    assert all("_lineage_root_id" not in r for r in rows)


def test_a_compression_root_is_projected_onto_its_tip(family: SessionDB) -> None:
    row = {r.get("_lineage_root_id"): r for r in family.list_sessions_rich()}["main"]
    assert row["id"] == "main3" and row["started_at"] == T + 100
    assert row["model"] == "tip-model" and row["ended_at"] is None and row["end_reason"] is None
    assert row["preview"] == "tip segment" and row["last_active"] == T + 500
    assert row["message_count"] == 2 and row["title"] is None


def test_projection_can_be_switched_off(family: SessionDB) -> None:
    rows = family.list_sessions_rich(project_compression_tips=False)
    assert ids(rows) == ["agent", "main", "branch", "root"]
    assert rows[1]["preview"] == "first segment"


def test_order_by_last_active_uses_the_newest_activity_in_the_chain(family: SessionDB) -> None:
    family.append_message("root", "user", "revived", timestamp=T + 400)
    rows = family.list_sessions_rich(order_by_last_active=True)
    assert ids(rows) == ["main3", "root", "agent", "branch"]
    unprojected = family.list_sessions_rich(order_by_last_active=True,
                                            project_compression_tips=False)
    assert ids(unprojected)[0] == "main"


def test_source_filters_limit_and_offset(family: SessionDB) -> None:
    make(family, "tg", T + 1000, source="telegram")
    assert ids(family.list_sessions_rich(source="telegram")) == ["tg"]
    assert "tg" not in ids(family.list_sessions_rich(exclude_sources=["telegram"]))
    assert ids(family.list_sessions_rich(limit=2, offset=1)) == ["agent", "main3"]
    assert family.list_sessions_rich(limit=0) == []
    with pytest.raises(ValueError):
        family.list_sessions_rich(limit=-1)
    with pytest.raises(ValueError):
        family.list_sessions_rich(offset=-1)


def test_rows_carry_every_session_column(family: SessionDB) -> None:
    row = family.list_sessions_rich()[0]
    assert {"id", "source", "started_at", "title", "pinned", "archived", "preview",
            "last_active", "message_count"} <= set(row)


# --------------------------------------------------------------------------- search_sessions


def test_search_sessions_orders_by_last_activity_without_a_child_filter(family) -> None:
    rows = family.search_sessions()
    assert ids(rows)[:2] == ["main3", "sub"]
    assert len(rows) == 8 and "last_active" in rows[0] and "preview" not in rows[0]
    assert ids(family.search_sessions(source="subagent")) == ["sub"]
    assert ids(family.search_sessions(limit=1, offset=1)) == ["sub"]


def test_search_sessions_breaks_ties_by_start_then_id(db: SessionDB) -> None:
    make(db, "a", T)
    make(db, "b", T)
    make(db, "c", T - 1)
    db.append_message("c", "user", "x", timestamp=T)
    assert ids(db.search_sessions()) == ["b", "a", "c"]


def test_session_count_counts_all_or_one_source(family: SessionDB) -> None:
    assert family.session_count() == 8
    assert family.session_count("subagent") == 1
    assert family.session_count("nope") == 0


# --------------------------------------------------------------------------- seed queries


def test_recent_sessions_with_preview(family: SessionDB) -> None:
    with engine_mod.reading(family.engine) as conn:
        rows = queries.recent_sessions(conn, limit=3)
    assert ids(rows) == ["sub", "agent", "main3"]
    assert rows[2]["preview"] == "tip segment" and rows[2]["last_active"] == T + 500


def test_token_usage_statistics(db: SessionDB) -> None:
    make(db, "a", T, model="m1")
    make(db, "b", T, model="m1")
    make(db, "c", T, model="m2")
    make(db, "d", T)
    db.update_token_counts("a", input_tokens=10, output_tokens=5, estimated_cost_usd=1.0)
    db.update_token_counts("b", input_tokens=1, output_tokens=1, estimated_cost_usd=0.5)
    db.update_token_counts("c", input_tokens=100, output_tokens=100, estimated_cost_usd=0.1)
    with engine_mod.reading(db.engine) as conn:
        by_model = queries.token_usage_by_model(conn)
        top = queries.top_token_sessions(conn, limit=2)
    assert by_model == [
        {"model": "m1", "session_count": 2, "total_input": 11, "total_output": 6,
         "total_cost": 1.5},
        {"model": "m2", "session_count": 1, "total_input": 100, "total_output": 100,
         "total_cost": 0.1},
    ]
    assert [(r["id"], r["total_tokens"]) for r in top] == [("c", 200), ("a", 15)]
