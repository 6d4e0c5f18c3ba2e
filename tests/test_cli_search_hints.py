"""When search finds nothing it says why when it can: a query that only excludes, an offset
past the last hit, words that are in session titles rather than messages. ``latest`` names
the most recently active session."""

from __future__ import annotations

import json

from cli_support import make_session, run


def _seed(store: str) -> None:
    make_session(store, "20260801_120000_aaaa11", title="数据库 notes", age_days=3,
                 texts=("borrow checker", "borrow again"))
    make_session(store, "20260802_120000_bbbb22", title="other", age_days=1,
                 texts=("lifetimes",))


def test_an_exclusion_only_query_says_why_it_matches_nothing(head_store: str) -> None:
    _seed(head_store)
    for args in (["--", "-borrow"], ["NOT", "borrow"]):
        result = run("--db", head_store, "search", *args)
        assert result.exit_code == 0
        assert "no messages match" in result.stdout
        assert "only excludes" in result.stdout, result.stdout


def test_an_offset_past_the_end_names_the_total(head_store: str) -> None:
    _seed(head_store)
    result = run("--db", head_store, "search", "borrow", "--offset", "100000")
    assert result.exit_code == 0
    assert "matches 2 messages" in result.stdout and "--offset 0" in result.stdout


def test_words_found_only_in_titles_point_to_list_title(head_store: str) -> None:
    _seed(head_store)
    result = run("--db", head_store, "search", "数据库")
    assert "list --title" in result.stdout and "1 session title" in result.stdout


def test_latest_names_the_most_recently_active_session(head_store: str) -> None:
    _seed(head_store)
    result = run("--json", "--db", head_store, "show", "latest")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session"]["id"] == "20260802_120000_bbbb22"


def test_a_snippet_marks_every_occurrence_in_view(head_store: str) -> None:
    make_session(head_store, "20260803_120000_cccc33", texts=("在终端里运行终端测试",))
    doc = json.loads(run("--json", "--db", head_store, "search", "终端", "--markers").stdout)
    snippet = doc["results"][0]["hits"][0]["snippet"]
    assert snippet.count(">>>终端<<<") == 2, snippet


def test_model_narrows_search_to_sessions_of_that_model(head_store: str) -> None:
    make_session(head_store, "20260804_120000_dddd44", texts=("borrow here",),
                 extra={"model": "claude-sonnet-4"})
    make_session(head_store, "20260804_130000_eeee55", texts=("borrow there",),
                 extra={"model": "gpt-5"})
    doc = json.loads(run("--json", "--db", head_store, "search", "borrow", "--model",
                         "SONNET").stdout)
    assert [r["session"]["id"] for r in doc["results"]] == ["20260804_120000_dddd44"]
