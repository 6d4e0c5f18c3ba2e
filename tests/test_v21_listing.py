"""v21 API (docs/v21.md#parameters, docs/v21.md#behaviour-changes): ``list_sessions_rich``'s
full signature, visibility and projection, and ``session_count`` with the list's filters."""

from __future__ import annotations

import pytest
from backends import sql
from v21_stores import BASE_TS, make, set_columns

from hermes_store import SessionDB


def ids(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows]


# --------------------------------------------------------------------------- visibility


def test_subagents_are_hidden_even_when_orphaned(db: SessionDB) -> None:
    make(db, "root")
    make(db, "sub", parent="root", started_at=BASE_TS + 5, markers={"_delegate_from": "root"})
    make(db, "orphan", started_at=BASE_TS + 6, markers={"_delegate_from": "__orphaned__"})
    make(db, "plain_child", parent="root", started_at=BASE_TS + 7)
    assert ids(db.list_sessions_rich()) == ["root"]
    assert set(ids(db.list_sessions_rich(include_children=True))) == {
        "root", "sub", "orphan", "plain_child"}


def test_a_marked_branch_stays_visible_after_its_parent_is_re_ended(db: SessionDB) -> None:
    make(db, "parent", ended_at=BASE_TS + 10, end_reason="branched")
    make(db, "branch", parent="parent", started_at=BASE_TS + 20,
         markers={"_branched_from": "parent"})
    make(db, "unmarked", parent="parent", started_at=BASE_TS + 21)
    assert set(ids(db.list_sessions_rich())) == {"parent", "branch", "unmarked"}
    db.reopen_session("parent")
    db.end_session("parent", "user_exit")
    assert set(ids(db.list_sessions_rich())) == {"parent", "branch"}


def test_a_child_whose_parent_row_is_gone_is_a_root(db: SessionDB) -> None:
    make(db, "parent")
    make(db, "child", parent="parent", started_at=BASE_TS + 5)
    if db.engine.dialect.name == "sqlite":
        db._conn.execute("PRAGMA foreign_keys = OFF")
        db._conn.execute("DELETE FROM sessions WHERE id = 'parent'")
    else:  # triggers (foreign keys included) are off for this one transaction
        sql(db, "SET LOCAL session_replication_role = replica; "
                "DELETE FROM sessions WHERE id = 'parent'")
    assert ids(db.list_sessions_rich()) == ["child"]


# --------------------------------------------------------------------------- projection


def test_projection_walks_by_the_compression_tip(db: SessionDB) -> None:
    # The continuation was written before its parent's end (the agent's real order), and a
    # stale closed sibling loses to the open continuation.
    make(db, "root", ended_at=BASE_TS + 50, end_reason="compression", cwd="/old",
         archived=0, messages=1)
    make(db, "stale", parent="root", started_at=BASE_TS + 40, ended_at=BASE_TS + 45,
         end_reason="user_exit")
    make(db, "tip", parent="root", started_at=BASE_TS + 30, cwd="/new", git_branch="main",
         git_repo_root="/new", title="Tip title", messages=2)
    [row] = db.list_sessions_rich()
    assert (row["id"], row["_lineage_root_id"], row["started_at"]) == ("tip", "root", BASE_TS)
    assert (row["cwd"], row["git_branch"], row["git_repo_root"], row["title"]) == (
        "/new", "main", "/new", "Tip title")
    assert row["preview"] == "turn 0 of tip"


def test_a_projected_row_keeps_the_roots_archived_flag(db: SessionDB) -> None:
    make(db, "root", ended_at=BASE_TS + 10, end_reason="compression", archived=1)
    make(db, "tip", parent="root", started_at=BASE_TS + 10)
    [row] = db.list_sessions_rich(include_archived=True)
    assert (row["id"], row["archived"]) == ("tip", 1)
    assert db.list_sessions_rich() == []


def test_include_children_and_the_switch_turn_projection_off(db: SessionDB) -> None:
    make(db, "root", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "tip", parent="root", started_at=BASE_TS + 10)
    assert ids(db.list_sessions_rich(project_compression_tips=False)) == ["root"]
    rows = db.list_sessions_rich(include_children=True)
    assert ids(rows) == ["tip", "root"] and all("_lineage_root_id" not in r for r in rows)


def test_an_old_root_with_a_fresh_tip_wins_a_one_row_page(db: SessionDB) -> None:
    make(db, "old_root", ended_at=BASE_TS + 10, end_reason="compression", messages=1)
    make(db, "fresh_tip", parent="old_root", started_at=BASE_TS + 10)
    db.append_message("fresh_tip", "user", "now", timestamp=BASE_TS + 9_000)
    make(db, "newer", started_at=BASE_TS + 5_000, messages=1)
    assert ids(db.list_sessions_rich(limit=1)) == ["newer"]
    [row] = db.list_sessions_rich(limit=1, order_by_last_active=True)
    assert (row["id"], row["_lineage_root_id"]) == ("fresh_tip", "old_root")


# --------------------------------------------------------------------------- filters


def test_archived_sessions_are_listed_only_when_asked(db: SessionDB) -> None:
    make(db, "kept")
    make(db, "shelved", started_at=BASE_TS + 1, archived=1)
    assert ids(db.list_sessions_rich()) == ["kept"]
    assert ids(db.list_sessions_rich(include_archived=True)) == ["shelved", "kept"]
    assert ids(db.list_sessions_rich(archived_only=True)) == ["shelved"]
    assert ids(db.list_sessions_rich(include_archived=False, archived_only=True)) == ["shelved"]


@pytest.mark.parametrize("prefix", ["/repo", "/repo/", "/repo\\"])
def test_cwd_prefix_matches_the_directory_and_below_it(db: SessionDB, prefix: str) -> None:
    for n, cwd in enumerate(["/repo", "/repo/src", "C:/x", "/repo\\win", "/repo-wt", "/rep",
                             None]):
        make(db, f"s{n}", started_at=BASE_TS + n, cwd=cwd)
    assert ids(db.list_sessions_rich(None, None, prefix)) == ["s3", "s1", "s0"]


def test_cwd_prefix_is_literal(db: SessionDB) -> None:
    make(db, "pct", cwd="/a%b/x")
    make(db, "other", started_at=BASE_TS + 1, cwd="/aXYb/x")
    assert ids(db.list_sessions_rich(cwd_prefix="/a%b")) == ["pct"]
    assert ids(db.list_sessions_rich(cwd_prefix="/a_Yb")) == []


def test_min_message_count_and_sources(db: SessionDB) -> None:
    make(db, "empty")
    make(db, "busy", "telegram", started_at=BASE_TS + 1, messages=3)
    assert ids(db.list_sessions_rich(min_message_count=3)) == ["busy"]
    assert ids(db.list_sessions_rich(min_message_count=4)) == []
    assert ids(db.list_sessions_rich(exclude_sources=["telegram"])) == ["empty"]
    assert ids(db.list_sessions_rich(source="telegram")) == ["busy"]


# --------------------------------------------------------------------------- needles


def test_id_query_matches_through_the_continuation_chain(db: SessionDB) -> None:
    make(db, "alpha_root", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "tip_XYZ", parent="alpha_root", started_at=BASE_TS + 10)
    make(db, "beta", started_at=BASE_TS + 20)
    assert ids(db.list_sessions_rich(order_by_last_active=True, id_query=" xyz ")) == ["tip_XYZ"]
    assert ids(db.list_sessions_rich(order_by_last_active=True, id_query="ALPHA")) == ["tip_XYZ"]
    assert db.list_sessions_rich(order_by_last_active=True, id_query="zzz") == []
    assert len(db.list_sessions_rich(id_query="zzz")) == 2  # only with order_by_last_active


def test_search_query_matches_titles_and_their_compact_form(db: SessionDB) -> None:
    make(db, "a", title="Rifle AN-94 notes")
    make(db, "b", started_at=BASE_TS + 1, title="Deploy gateway")
    make(db, "c", started_at=BASE_TS + 2, title="50% off_sale")
    search = lambda q: ids(db.list_sessions_rich(order_by_last_active=True,  # noqa: E731
                                                 search_query=q))
    assert search("an94") == ["a"]
    assert search("an-94") == ["a"]
    assert search("GATEWAY") == ["b"]
    assert search("50%") == ["c"]
    assert search("0_s") == []
    assert search("b") == ["b"]  # ids match too


def test_compact_rows_leave_out_the_system_prompt_only(db: SessionDB) -> None:
    make(db, "root", ended_at=BASE_TS + 10, end_reason="compression")
    make(db, "tip", parent="root", started_at=BASE_TS + 10, cwd="/w")
    db.update_system_prompt("tip", "a long prompt")
    [full] = db.list_sessions_rich()
    [compact] = db.list_sessions_rich(compact_rows=True)
    assert full["system_prompt"] == "a long prompt"
    assert "system_prompt" not in compact
    assert set(full) - set(compact) == {"system_prompt"}
    assert (compact["id"], compact["cwd"]) == ("tip", "/w")


# --------------------------------------------------------------------------- session_count


def test_session_count_takes_the_lists_filters(db: SessionDB) -> None:
    make(db, "root", ended_at=BASE_TS + 10, end_reason="compression", cwd="/r", messages=2)
    make(db, "tip", parent="root", started_at=BASE_TS + 10, cwd="/r")
    make(db, "sub", "cli", parent="root", started_at=BASE_TS + 5,
         markers={"_delegate_from": "root"})
    make(db, "shelved", "telegram", started_at=BASE_TS + 20, archived=1)
    assert db.session_count() == 3
    assert db.session_count(exclude_children=True) == len(db.list_sessions_rich()) == 1
    assert db.session_count(include_archived=True) == 4
    assert db.session_count(archived_only=True) == 1
    assert db.session_count("telegram", include_archived=True) == 1
    assert db.session_count(exclude_sources=["cli"], include_archived=True) == 1
    assert db.session_count(cwd_prefix="/r/") == 2
    assert db.session_count(min_message_count=2) == 1


# --------------------------------------------------------------------------- the v21 store


def test_a_v21_store_lists_projected_and_counts_like_its_pages(v21_db: SessionDB) -> None:
    rows = v21_db.list_sessions_rich(limit=100)
    by_root = {r.get("_lineage_root_id"): r["id"] for r in rows}
    assert by_root["20260707_060600_e4ca3a"] == "20260808_070700_219dc0"
    assert by_root["20261010_090900_33ce8e"] == "20261111_101000_2e75cf"
    assert v21_db.session_count(exclude_children=True) == len(rows) == 14
    assert v21_db.session_count() == 16
    set_columns(v21_db, "20260113_121200_33e82d", archived=1)
    assert v21_db.session_count() == 15
