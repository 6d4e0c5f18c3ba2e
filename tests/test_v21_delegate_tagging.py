"""v21 API (docs/v21.md#behaviour-changes): the agent's one-time tagging of subagents written
before ``_delegate_from`` existed (files stamped below 16), as a repository function the
adopting open runs."""

from __future__ import annotations

from v21_stores import BASE_TS, column, config_of, make, set_columns

from hermes_store import SessionDB
from hermes_store.repo import delegates


def tag(db: SessionDB) -> int:
    return db._write(delegates.tag_delegates)


def test_children_of_ordinary_parents_become_their_subagents(db: SessionDB) -> None:
    make(db, "parent", ended_at=BASE_TS + 10, end_reason="user_exit")
    make(db, "child", parent="parent", started_at=BASE_TS + 5)
    set_columns(db, "child", model_config='{"temperature": 0.2}')
    assert tag(db) == 1
    assert config_of(db, "child") == {"temperature": 0.2, "_delegate_from": "parent"}
    assert tag(db) == 0


def test_branches_continuations_and_tagged_rows_are_left_alone(db: SessionDB) -> None:
    make(db, "compressed", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "continuation", parent="compressed", started_at=BASE_TS + 10)
    make(db, "branched", ended_at=BASE_TS + 10, end_reason="branched")
    make(db, "branch", parent="branched", started_at=BASE_TS + 20)
    make(db, "early", parent="branched", started_at=BASE_TS + 5)
    make(db, "marked", parent="branched", started_at=BASE_TS + 1,
         markers={"_branched_from": "branched"})
    make(db, "tagged", parent="branched", started_at=BASE_TS + 2,
         markers={"_delegate_from": "elsewhere"})
    assert tag(db) == 1
    assert config_of(db, "early") == {"_delegate_from": "branched"}
    for untouched in ("continuation", "branch"):
        assert column(db, untouched, "model_config") is None
    assert config_of(db, "tagged")["_delegate_from"] == "elsewhere"


def test_small_untitled_childless_tool_roots_become_orphaned_subagents(db: SessionDB) -> None:
    make(db, "orphan")
    db.append_message("orphan", "tool", "ran", tool_call_id="c")
    make(db, "titled", title="Kept")
    db.append_message("titled", "tool", "ran", tool_call_id="c")
    make(db, "chatty", messages=26)
    db.append_message("chatty", "tool", "ran", tool_call_id="c")
    make(db, "no_tools", messages=3)
    make(db, "parent_root")
    db.append_message("parent_root", "tool", "ran", tool_call_id="c")
    make(db, "kid", parent="parent_root", markers={"_delegate_from": "parent_root"})
    assert tag(db) == 1
    assert config_of(db, "orphan") == {"_delegate_from": "__orphaned__"}
    assert [r["id"] for r in db.list_sessions_rich(limit=50)].count("orphan") == 0


def test_a_model_config_that_is_not_an_object_is_skipped(db: SessionDB) -> None:
    make(db, "parent")
    make(db, "list_config", parent="parent")
    make(db, "broken_config", parent="parent")
    make(db, "good", parent="parent")
    set_columns(db, "list_config", model_config="[1, 2]")
    set_columns(db, "broken_config", model_config="{nope")
    assert tag(db) == 1
    assert column(db, "list_config", "model_config") == "[1, 2]"
    assert column(db, "broken_config", "model_config") == "{nope"
    assert config_of(db, "good") == {"_delegate_from": "parent"}


def test_on_the_v21_store_it_tags_the_small_tool_roots_once(v21_db: SessionDB) -> None:
    # The agent runs it only below stamp 16, so this store's own open never does; run by hand,
    # it finds the two small untitled roots that ran tools, and nothing on a second run.
    visible = {r["id"] for r in v21_db.list_sessions_rich(limit=100)}
    assert tag(v21_db) == 2
    assert tag(v21_db) == 0
    hidden = visible - {r["id"] for r in v21_db.list_sessions_rich(limit=100)}
    assert hidden == {"20260202_010100_fcef0f", "20260416_151500_2f2875"}
    assert config_of(v21_db, "20260416_151500_2f2875") == {"_delegate_from": "__orphaned__"}
