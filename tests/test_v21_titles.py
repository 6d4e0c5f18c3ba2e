"""v21 API (docs/v21.md#behaviour-changes): a title held by a segment the session continues
moves to it in one unit; any other holder still clashes."""

from __future__ import annotations

import threading

import pytest
from v21_stores import BASE_TS, make

from hermes_store import SessionDB


def chain(db: SessionDB) -> None:
    make(db, "root", ended_at=BASE_TS + 10, end_reason="compression", title="Fix build")
    make(db, "mid", parent="root", started_at=BASE_TS + 10, ended_at=BASE_TS + 20,
         end_reason="compression", title="Fix build #2")
    make(db, "tip", parent="mid", started_at=BASE_TS + 20)


def test_a_tip_takes_back_its_conversations_base_title(db: SessionDB) -> None:
    chain(db)
    assert db.set_session_title("tip", "Fix build") is True
    assert db.get_session_title("tip") == "Fix build"
    assert db.get_session_title("root") is None
    assert db.get_session_title("mid") == "Fix build #2"
    assert db.set_session_title("tip", "Fix build #2") is True
    assert (db.get_session_title("mid"), db.get_session_title("tip")) == (None, "Fix build #2")


def test_a_descendant_holding_the_title_still_clashes(db: SessionDB) -> None:
    chain(db)
    db.set_session_title("tip", "Newest")
    with pytest.raises(ValueError, match="already in use by session tip"):
        db.set_session_title("root", "Newest")
    assert db.get_session_title("tip") == "Newest"


@pytest.mark.parametrize("relation", ["unrelated", "branch", "subagent", "tool"])
def test_holders_outside_the_continuation_chain_still_clash(db: SessionDB,
                                                             relation: str) -> None:
    make(db, "parent", ended_at=BASE_TS + 10,
         end_reason="branched" if relation == "branch" else "compression", title="Taken")
    if relation == "unrelated":
        make(db, "child", started_at=BASE_TS + 20)
    elif relation == "subagent":
        make(db, "child", parent="parent", started_at=BASE_TS + 20,
             markers={"_delegate_from": "parent"})
    else:
        make(db, "child", "tool" if relation == "tool" else "cli", parent="parent",
             started_at=BASE_TS + 20)
    with pytest.raises(ValueError, match="already in use by session parent"):
        db.set_session_title("child", "Taken")
    assert db.get_session_title("parent") == "Taken"
    assert db.get_session_title("child") is None


def test_clearing_a_title_never_touches_an_ancestor(db: SessionDB) -> None:
    chain(db)
    assert db.set_session_title("tip", None) is True
    assert db.get_session_title("root") == "Fix build"


def test_concurrent_moves_leave_the_title_in_one_place(db: SessionDB) -> None:
    chain(db)
    make(db, "other_tip", parent="mid", started_at=BASE_TS + 30)
    results: dict[str, object] = {}

    def take(sid: str) -> None:
        with SessionDB(db.location) as mine:
            try:
                results[sid] = mine.set_session_title(sid, "Fix build")
            except ValueError as exc:
                results[sid] = exc

    threads = [threading.Thread(target=take, args=(sid,)) for sid in ("tip", "other_tip")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    holders = [sid for sid in ("root", "mid", "tip", "other_tip")
               if db.get_session_title(sid) == "Fix build"]
    assert len(holders) == 1
    assert results[holders[0]] is True


def test_a_v21_store_moves_a_compressed_roots_title(v21_db: SessionDB) -> None:
    root, tip = "20260707_060600_e4ca3a", "20260808_070700_219dc0"
    assert v21_db.set_session_title(tip, "数据库 迁移 6") is True
    assert (v21_db.get_session_title(root), v21_db.get_session_title(tip)) == (
        None, "数据库 迁移 6")
