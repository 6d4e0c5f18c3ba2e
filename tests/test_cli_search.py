"""hermes-store search as a user types it: exclusions, paging, totals."""

from __future__ import annotations

import pytest
from cli_support import make_session, run, run_json

from hermes_store.search.results import with_exclusions

RUST = "20260101_100000_rust0001"
C_LANG = "20260102_100000_clang002"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, RUST, texts=("unsafe Rust code in the parser",))
    make_session(head_store, C_LANG, texts=("unsafe C code in the parser",))
    return head_store


def _found(doc: dict) -> set[str]:
    return {group["session"]["id"] for group in doc["results"]}


def test_a_dash_word_excludes_it(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "search", "unsafe -Rust")
    assert code == 0, doc
    assert _found(doc) == {C_LANG}
    assert doc["query"] == "unsafe -Rust"


def test_an_unquoted_dash_word_is_part_of_the_query_not_an_option(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "search", "unsafe", "-Rust", "--limit", "5")
    assert code == 0, doc
    assert _found(doc) == {C_LANG}
    code, doc = run_json("--db", seeded, "search", "--", "unsafe", "-Rust")
    assert (code, _found(doc)) == (0, {C_LANG})


def test_a_mistyped_long_option_is_still_a_usage_error(seeded: str) -> None:
    result = run("--db", seeded, "search", "unsafe", "--limt", "5")
    assert result.exit_code == 2
    assert "--limt" in result.output


@pytest.mark.parametrize(("typed", "expression"), [
    ("unsafe -Rust", "unsafe NOT Rust"),
    ("-Rust unsafe", "unsafe NOT Rust"),
    ("a -b c", "a c NOT b"),
    ('parser -"unsafe Rust"', 'parser NOT "unsafe Rust"'),
    ("a -b OR c", "a NOT b OR c"),
    ("a OR -b", "a"),
    ("error -1 chat-send", "error -1 chat-send"),
    ("a NOT b", "a NOT b"),
])
def test_exclusions_move_to_the_end_of_their_or_branch(typed: str, expression: str) -> None:
    assert with_exclusions(typed) == expression


# --------------------------------------------------------------------------- paging


@pytest.fixture
def many(head_store: str) -> str:
    for i in range(25):
        make_session(head_store, f"20260201_10{i:04d}_many{i:04d}", texts=(f"flaky test {i}",))
    return head_store


def test_search_reports_the_total_and_whether_more_match(many: str) -> None:
    code, doc = run_json("--db", many, "search", "flaky", "--limit", "10")
    assert code == 0
    assert (doc["count"], doc["total"], doc["total_exact"], doc["more"]) == (10, 25, True, True)
    human = run("--db", many, "search", "flaky", "--limit", "10").stdout
    assert "15 more hits (--offset 10 shows the next)" in human


def test_offset_pages_through_every_hit_once(many: str) -> None:
    seen: list[int] = []
    for offset in (0, 10, 20):
        _, doc = run_json("--db", many, "search", "flaky", "--limit", "10",
                          "--offset", str(offset))
        seen += [h["message_id"] for g in doc["results"] for h in g["hits"]]
        assert doc["offset"] == offset
    assert len(seen) == len(set(seen)) == 25
    assert doc["more"] is False
    assert "more hit" not in run("--db", many, "search", "flaky", "--offset", "20").stdout
