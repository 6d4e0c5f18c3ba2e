"""v21 API (docs/v21.md#bulk, docs/v21.md#behaviour-changes): deletes take subagents along
(the delegate cascade) and orphan every other child; the empty and ghost sweeps."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from backends import sql
from v21_stores import BASE_TS, column, make

from hermes_store import SessionDB

OLD = time.time() - 3 * 86400


def family(db: SessionDB) -> None:
    make(db, "P", ended_at=BASE_TS + 100, end_reason="compression", messages=1)
    make(db, "S", parent="P", started_at=BASE_TS + 1, markers={"_delegate_from": "P"},
         messages=1)
    make(db, "SS", parent="S", started_at=BASE_TS + 2, markers={"_delegate_from": "S"})
    make(db, "D", started_at=BASE_TS + 3, markers={"_delegate_from": "P"})
    make(db, "O", parent="P", started_at=BASE_TS + 4, markers={"_delegate_from": "__orphaned__"})
    make(db, "US", parent="S", started_at=BASE_TS + 5)
    make(db, "U", parent="P", started_at=BASE_TS + 6, messages=1)
    make(db, "B", parent="P", started_at=BASE_TS + 7, markers={"_branched_from": "P"})


def test_delete_session_takes_its_subagents_and_orphans_the_rest(db: SessionDB) -> None:
    family(db)
    assert db.delete_session("P") is True
    for gone in ("P", "S", "SS", "D", "O"):
        assert db.get_session(gone) is None, gone
        assert db.get_messages(gone, include_inactive=True) == []
    for kept in ("US", "U", "B"):
        assert column(db, kept, "parent_session_id") is None, kept
    assert db.message_count("U") == 1
    assert db.delete_session("P") is False
    assert db.delete_session("") is False


def test_marker_cycles_end_and_doomed_ids_are_never_collected(db: SessionDB) -> None:
    make(db, "A", markers={"_delegate_from": "B"})
    make(db, "B", started_at=BASE_TS + 1, markers={"_delegate_from": "A"})
    make(db, "C", started_at=BASE_TS + 2, markers={"_delegate_from": "B"})
    assert db.delete_session("A") is True
    assert [db.get_session(s) for s in ("A", "B", "C")] == [None, None, None]
    make(db, "X", markers={"_delegate_from": "Y"})
    make(db, "Y", started_at=BASE_TS + 1, markers={"_delegate_from": "X"})
    assert db.delete_sessions(["X", "Y"]) == 2


def test_delete_sessions_counts_the_listed_ids_that_existed(db: SessionDB,
                                                           tmp_path: Path) -> None:
    family(db)
    make(db, "pinned", started_at=BASE_TS + 50, pinned=1)
    make(db, "archived", started_at=BASE_TS + 51, archived=1)
    make(db, "open", started_at=BASE_TS + 52)
    files = tmp_path / "sessions"
    files.mkdir()
    for sid in ("S", "SS", "pinned", "U"):
        (files / f"{sid}.json").write_text("{}")
    assert db.delete_sessions(["P", "P", "", 7, None, "ghost", "pinned", "archived", "open"],
                              sessions_dir=files) == 4
    assert sorted(p.name for p in files.iterdir()) == ["U.json"]
    assert db.get_session("SS") is None and db.get_session("U") is not None


@pytest.mark.parametrize("empty", [None, []])
def test_delete_sessions_of_nothing_writes_nothing(db: SessionDB, empty: object) -> None:
    assert db.delete_sessions(empty) == 0


def test_deletes_remove_usage_rows_and_cascaded_files(db: SessionDB, tmp_path: Path) -> None:
    family(db)
    db.update_token_counts("S", input_tokens=5, model="m")
    files = tmp_path / "sessions"
    files.mkdir()
    (files / "request_dump_SS_1.json").write_text("{}")
    assert db.delete_session("P", sessions_dir=files)
    assert list(files.iterdir()) == []
    assert sql(db, "SELECT count(*) FROM session_model_usage")[0][0] == 0


def test_concurrent_deletes_have_one_winner(db: SessionDB) -> None:
    family(db)
    results: list[bool] = []

    def delete() -> None:
        with SessionDB(db.location) as mine:
            results.append(mine.delete_session("P"))

    threads = [threading.Thread(target=delete) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]


# --------------------------------------------------------------------------- if empty


def test_delete_session_if_empty_needs_no_title_message_or_child(db: SessionDB) -> None:
    make(db, "titled", title="Named")
    make(db, "talked", messages=1)
    make(db, "parent")
    make(db, "child", parent="parent", markers={"_delegate_from": "parent"})
    make(db, "bare")
    for sid in ("titled", "talked", "parent", "ghost", None, ""):
        assert db.delete_session_if_empty(sid) is False
    assert db.delete_session_if_empty("bare") is True
    assert db.get_session("bare") is None and db.get_session("parent") is not None
    with pytest.raises(TypeError):
        db.delete_session_if_empty(5)


# --------------------------------------------------------------------------- sweeps


def test_empty_sweep_takes_ended_unarchived_unpinned_empty_sessions(db: SessionDB) -> None:
    make(db, "empty", ended_at=BASE_TS + 1, end_reason="user_exit")
    make(db, "open_empty")
    make(db, "archived_empty", ended_at=BASE_TS + 1, archived=1)
    make(db, "pinned_empty", ended_at=BASE_TS + 1, pinned=1)
    make(db, "talked", ended_at=BASE_TS + 1, messages=1)
    make(db, "kid", parent="empty", started_at=BASE_TS + 2, messages=1)
    assert db.count_empty_sessions() == 1
    assert db.delete_empty_sessions() == 1
    assert db.get_session("empty") is None
    assert column(db, "kid", "parent_session_id") is None
    assert db.count_empty_sessions() == 0


def test_sweeps_skip_lineages_with_a_pinned_segment(db: SessionDB) -> None:
    make(db, "root", ended_at=BASE_TS + 10, end_reason="compression", pinned=1, messages=1,
         source="tui", started_at=OLD - 100)
    make(db, "tip", "tui", parent="root", started_at=OLD, ended_at=OLD + 1,
         end_reason="user_exit")
    assert db.count_empty_sessions() == 0
    assert db.prune_empty_ghost_sessions() == 0
    db.unpin_session("root")
    assert db.count_empty_sessions() == 1
    assert db.prune_empty_ghost_sessions() == 1
    assert db.get_session("tip") is None


def test_ghost_sweep_takes_old_untitled_empty_tui_sessions(db: SessionDB,
                                                           tmp_path: Path) -> None:
    make(db, "ghost", "tui", started_at=OLD, ended_at=OLD + 1)
    make(db, "fresh", "tui", started_at=time.time() - 60, ended_at=time.time() - 30)
    make(db, "titled", "tui", started_at=OLD, ended_at=OLD + 1, title="Kept")
    make(db, "cli", "cli", started_at=OLD, ended_at=OLD + 1)
    make(db, "open", "tui", started_at=OLD)
    make(db, "talked", "tui", started_at=OLD, ended_at=OLD + 1, messages=1)
    make(db, "pinned", "tui", started_at=OLD, ended_at=OLD + 1, pinned=1)
    make(db, "ghost_child", parent="ghost", started_at=OLD + 2, messages=1)
    (tmp_path / "ghost.jsonl").write_text("")
    assert db.prune_empty_ghost_sessions(sessions_dir=tmp_path) == 1
    assert db.get_session("ghost") is None and not (tmp_path / "ghost.jsonl").exists()
    assert column(db, "ghost_child", "parent_session_id") is None
    assert db.prune_empty_ghost_sessions() == 0


def test_a_v21_store_deletes_a_compressed_root_and_keeps_its_continuation(
        v21_db: SessionDB) -> None:
    root, tip = "20260707_060600_e4ca3a", "20260808_070700_219dc0"
    assert v21_db.delete_session(root) is True
    assert v21_db.get_session(tip)["parent_session_id"] is None
    assert v21_db.count_empty_sessions() == 0
