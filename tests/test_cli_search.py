"""hermes-store search as a user types it: exclusions, paging, totals."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import make_session, run, run_json

from hermes_store.search.results import with_exclusions

RUST = "20260101_100000_rust0001"
C_LANG = "20260102_100000_clang002"


@pytest.fixture
def store(head_db: Path) -> Path:
    make_session(head_db, RUST, texts=("unsafe Rust code in the parser",))
    make_session(head_db, C_LANG, texts=("unsafe C code in the parser",))
    return head_db


def _found(doc: dict) -> set[str]:
    return {group["session"]["id"] for group in doc["results"]}


def test_a_dash_word_excludes_it(store: Path) -> None:
    code, doc = run_json("--db", str(store), "search", "unsafe -Rust")
    assert code == 0, doc
    assert _found(doc) == {C_LANG}
    assert doc["query"] == "unsafe -Rust"


def test_an_unquoted_dash_word_is_part_of_the_query_not_an_option(store: Path) -> None:
    code, doc = run_json("--db", str(store), "search", "unsafe", "-Rust", "--limit", "5")
    assert code == 0, doc
    assert _found(doc) == {C_LANG}
    code, doc = run_json("--db", str(store), "search", "--", "unsafe", "-Rust")
    assert (code, _found(doc)) == (0, {C_LANG})


def test_a_mistyped_long_option_is_still_a_usage_error(store: Path) -> None:
    result = run("--db", str(store), "search", "unsafe", "--limt", "5")
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
