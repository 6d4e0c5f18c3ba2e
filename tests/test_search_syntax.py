"""What ``-word`` means is one parameter, ``syntax``: the API's default keeps v11's reading (a
word), ``syntax="exclusions"`` is the command line's (an exclusion); README, docs/search.md
and ``search --help`` say the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import make_session, run_json

from hermes_store import SessionDB

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, "20260801_120000_aaaa11", texts=("borrow checker rules",))
    make_session(head_store, "20260801_130000_bbbb22", texts=("borrow a cup",))
    return head_store


def _ids(hits) -> set[str]:
    return {h["session_id"] for h in hits}


def test_the_api_reads_minus_word_as_a_word_unless_asked(seeded: str) -> None:
    with SessionDB(seeded) as db:
        assert _ids(db.search_messages("borrow -checker")) == {"20260801_120000_aaaa11"}
        assert _ids(db.search_messages("borrow -checker", syntax="exclusions")) == {
            "20260801_130000_bbbb22"}
        with pytest.raises(ValueError, match="syntax"):
            db.search_messages("borrow", syntax="shell")


def test_the_command_line_excludes_as_the_exclusions_syntax_does(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "search", "borrow", "-checker")
    assert code == 0
    assert {r["session"]["id"] for r in doc["results"]} == {"20260801_130000_bbbb22"}


def test_readme_docs_and_help_say_the_same() -> None:
    from click.testing import CliRunner

    from hermes_store.cli import main

    helptext = CliRunner().invoke(main, ["search", "--help"]).output
    for text in (helptext, (ROOT / "README.md").read_text(), (ROOT / "docs/search.md").read_text()):
        assert 'syntax="exclusions"' in text
