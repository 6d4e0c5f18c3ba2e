"""hermes-store list, show and search: full ids, unique prefixes, filters, grouped search hits."""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import table_names
from cli_support import (
    add_message,
    continues,
    execute,
    fingerprint,
    make_session,
    on_server,
    rows,
    run,
    run_json,
)

from hermes_store.cli.render import ITEM_KEYS

A = "20260101_100000_aaaa1111"
B = "20260102_100000_bbbb2222"
C = "20260103_100000_bbbb3333"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, A, age_days=3, title="Alpha", texts=("deploy the gateway",))
    make_session(head_store, B, age_days=1, source="telegram", texts=("数据库 迁移 plan",))
    make_session(head_store, C, age_days=2, pinned=True, title="Pinned one")
    return head_store


def test_list_puts_pinned_first_then_newest_activity_with_full_ids(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "list")
    assert code == 0
    assert [s["id"] for s in doc["sessions"]] == [C, B, A]
    assert set(ITEM_KEYS) <= set(doc["sessions"][0])
    assert doc["sessions"][0]["pinned"] is True
    assert doc["sessions"][1]["preview"].startswith("数据库")
    assert doc["sessions"][0]["last_active"].endswith("Z")
    human = run("--db", seeded, "list").stdout
    assert all(sid in human for sid in (A, B, C))


def test_list_limit_fetches_one_more_to_say_more_match(seeded: str) -> None:
    _, doc = run_json("--db", seeded, "list", "--limit", "2")
    assert doc["count"] == 2 and doc["more"] is True
    assert "more" in run("--db", seeded, "list", "--limit", "2").stdout
    _, doc = run_json("--db", seeded, "list", "--limit", "3")
    assert doc["more"] is False


def test_list_hides_archived_unless_asked(seeded: str) -> None:
    make_session(seeded, "20260104_100000_cccc4444", archived=True)
    _, doc = run_json("--db", seeded, "list")
    assert "20260104_100000_cccc4444" not in [s["id"] for s in doc["sessions"]]
    _, doc = run_json("--db", seeded, "list", "--archived")
    assert [s["id"] for s in doc["sessions"]] == ["20260104_100000_cccc4444"]
    _, doc = run_json("--db", seeded, "list", "--all")
    assert len(doc["sessions"]) == 4


def test_list_filters_by_source_activity_pinned_and_open(seeded: str) -> None:
    make_session(seeded, "20260105_100000_dddd5555", ended=False, age_days=10)

    def ids(*args: str) -> list[str]:
        return [s["id"] for s in run_json("--db", seeded, "list", *args)[1]["sessions"]]

    assert ids("--source", "telegram") == [B]
    assert ids("--newer-than", "36h") == [B]
    assert ids("--older-than", "5d") == ["20260105_100000_dddd5555"]
    assert ids("--pinned") == [C]
    assert ids("--open") == ["20260105_100000_dddd5555"]


def test_list_shows_created_and_current_source_when_they_differ(seeded: str) -> None:
    # A column of the upstream agent's schema that ours does not model.
    execute(seeded, "ALTER TABLE sessions ADD COLUMN created_source TEXT")
    execute(seeded, "UPDATE sessions SET created_source = 'cli' WHERE id = :sid", sid=B)
    assert "cli→telegram" in run("--db", seeded, "list").stdout
    _, doc = run_json("--db", seeded, "list", "--source", "telegram")
    assert doc["sessions"][0]["created_source"] == "cli"


def test_bad_age_is_a_usage_error(seeded: str) -> None:
    assert run("--db", seeded, "list", "--older-than", "3 months").exit_code == 2
    result = run("--db", seeded, "list", "--newer-than", "1d", "--older-than", "2d")
    assert result.exit_code == 2 and "empty time window" in result.stderr


def test_list_on_a_missing_file_is_not_found_and_on_an_empty_database_empty(
        empty_store: str) -> None:
    result = run("--db", empty_store, "list")
    if on_server(empty_store):
        assert result.exit_code == 0 and "is empty" in result.stderr
        assert ":***@" in result.stderr  # run() gave a password; the note masks it
        assert table_names(empty_store) == set()
    else:
        assert result.exit_code == 3 and "no store at" in result.stderr
        assert not Path(empty_store).exists()


def test_reading_commands_leave_the_file_unchanged(seeded: str) -> None:
    before = fingerprint(seeded)
    for args in (["list"], ["show", A], ["search", "gateway"]):
        assert run("--db", seeded, *args).exit_code == 0
    assert fingerprint(seeded) == before


def test_show_accepts_a_unique_prefix_and_prints_the_full_id(seeded: str) -> None:
    result = run("--db", seeded, "show", "20260101")
    assert result.exit_code == 0
    assert A in result.stdout and "deploy the gateway" in result.stdout


def test_show_ambiguous_prefix_exits_4_listing_candidates(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "show", "2026010")
    assert code == 4 and doc["ok"] is False
    assert doc["error"]["code"] == "ambiguous_id"
    assert {c["id"] for c in doc["error"]["candidates"]} == {A, B, C}
    human = run("--db", seeded, "show", "2026010")
    assert A in human.stderr and "Alpha" in human.stderr


def test_show_unknown_or_too_short_id_exits_3(seeded: str) -> None:
    assert run("--db", seeded, "show", "nope_nope").exit_code == 3
    assert run("--db", seeded, "show", "202").exit_code == 3


def test_show_ids_with_underscores_are_not_like_wildcards(seeded: str) -> None:
    # "20260101_1" would match "20260101x1…" under a bare LIKE; only real prefixes count.
    make_session(seeded, "20260101x100000_eeee", age_days=1)
    assert run_json("--db", seeded, "show", "20260101_1")[1]["session"]["id"] == A


def test_show_cuts_tool_results_unless_full_and_hides_compacted_rows(seeded: str) -> None:
    add_message(seeded, A, "assistant", "running", tool_calls='[{"id":"c1","type":"function",'
                '"function":{"name":"terminal","arguments":"{\\"command\\":\\"ls\\"}"}}]')
    add_message(seeded, A, "tool", "x" * 5000, tool_call_id="c1", tool_name="terminal")
    add_message(seeded, A, "user", "old summarised turn", compacted=1, active=0)
    out = run("--db", seeded, "show", A).stdout
    assert "terminal" in out and '"command": "ls"' in out
    assert "x" * 2000 in out and "x" * 2001 not in out
    assert "old summarised turn" not in out
    full = run("--db", seeded, "show", A, "--full", "--include-compacted").stdout
    assert "x" * 5000 in full and "old summarised turn" in full
    _, doc = run_json("--db", seeded, "show", A, "--tail", "1")
    assert [m["content"] for m in doc["messages"]] == ["x" * 5000]


def test_show_names_the_tip_of_a_compressed_session_and_tip_follows_it(head_store: str) -> None:
    root = make_session(head_store, "20260201_100000_root0001", age_days=2,
                        end_reason="compression", texts=("first half",))
    tip = make_session(head_store, "20260201_110000_tip00002", age_days=1, parent=root,
                       ended=False, texts=("second half",))
    continues(head_store, root, tip)
    out = run("--db", head_store, "show", root).stdout
    assert f"continued in {tip}" in out
    _, doc = run_json("--db", head_store, "show", root, "--tip")
    assert doc["session"]["id"] == tip
    _, doc = run_json("--db", head_store, "show", tip, "--lineage")
    assert [m["content"] for m in doc["messages"]] == ["first half", "second half"]
    assert doc["session"]["lineage_session_ids"] == [root, tip]


def test_show_lineage_marks_where_each_segment_begins(head_store: str) -> None:
    root = make_session(head_store, "20260201_100000_root0001", age_days=2,
                        end_reason="compression", texts=("first half",))
    tip = make_session(head_store, "20260201_110000_tip00002", age_days=1, parent=root,
                       ended=False, texts=("second half",))
    continues(head_store, root, tip)
    out = run("--db", head_store, "show", tip, "--lineage").stdout
    first, second = out.index(f"segment 1 of 2: {root}"), out.index(f"segment 2 of 2: {tip}")
    assert first < out.index("first half") < second < out.index("second half")
    assert "segment 1 of" not in run("--db", head_store, "show", tip).stdout


def test_search_groups_hits_by_session(seeded: str) -> None:
    add_message(seeded, A, "assistant", "the gateway is deployed")
    code, doc = run_json("--db", seeded, "search", "gateway")
    assert code == 0 and doc["count"] == 2
    assert [r["session"]["id"] for r in doc["results"]] == [A]
    assert len(doc["results"][0]["hits"]) == 2


def test_search_finds_a_two_character_cjk_term(seeded: str) -> None:
    _, doc = run_json("--db", seeded, "search", "迁移")
    assert [r["session"]["id"] for r in doc["results"]] == [B]


def test_search_never_shows_an_fts_syntax_error(seeded: str) -> None:
    for query in ('gateway AND (', '"unbalanced', "NOT", "*", "a:b:c"):
        result = run("--db", seeded, "search", query)
        assert result.exit_code == 0, query
        assert "syntax" not in result.output.lower() and "fts5" not in result.output.lower()


def test_search_filters_by_session_role_source_and_archived(seeded: str) -> None:
    add_message(seeded, B, "assistant", "gateway in telegram")

    def by(*args: str) -> set[str]:
        found = run_json("--db", seeded, "search", *args)[1]["results"]
        return {r["session"]["id"] for r in found}

    assert by("gateway") == {A, B}
    assert by("gateway", "--session", "20260102") == {B}
    assert by("gateway", "--role", "user") == {A}
    assert by("gateway", "--source", "telegram") == {B}
    execute(seeded, "UPDATE sessions SET archived = 1 WHERE id = :sid", sid=A)
    assert by("gateway") == {A, B}
    assert by("gateway", "--no-archived") == {B}
    assert "[archived]" in run("--db", seeded, "search", "deploy").stdout


def test_include_tools_finds_words_beyond_the_indexed_tool_prefix(seeded: str) -> None:
    add_message(seeded, A, "tool", "zebra output", tool_name="terminal")
    add_message(seeded, A, "tool", "y " * 6000 + "okapi", tool_name="terminal")
    assert run_json("--db", seeded, "search", "zebra")[1]["count"] == 1
    assert run_json("--db", seeded, "search", "okapi")[1]["count"] == 0
    _, doc = run_json("--db", seeded, "search", "okapi", "--include-tools")
    assert doc["count"] == 1 and doc["results"][0]["hits"][0]["role"] == "tool"


def test_search_newer_than_uses_session_activity(seeded: str) -> None:
    make_session(seeded, "20250101_100000_old00001", age_days=40, texts=("gateway long ago",))
    ids = {r["session"]["id"] for r in
           run_json("--db", seeded, "search", "gateway", "--newer-than", "30d")[1]["results"]}
    assert ids == {A}
    assert rows(seeded, "SELECT count(*) FROM sessions")[0][0] == 4


def test_list_age_filters_use_the_activity_of_the_whole_lineage(head_store: str) -> None:
    root = make_session(head_store, "20260201_100000_root0001", age_days=30,
                        end_reason="compression", texts=("first half",))
    tip = make_session(head_store, "20260201_110000_tip00002", age_days=1, parent=root,
                       texts=("second half",))
    continues(head_store, root, tip)
    _, doc = run_json("--db", head_store, "list", "--newer-than", "7d")
    assert [s["id"] for s in doc["sessions"]] == [tip]
    _, doc = run_json("--db", head_store, "list", "--older-than", "7d")
    assert doc["sessions"] == []
