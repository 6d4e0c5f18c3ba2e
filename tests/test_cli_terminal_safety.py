"""Message text comes from models and tool output: no control character in it reaches the
terminal raw from human output, while --json keeps the text exact."""

from __future__ import annotations

import pytest
from cli_support import add_message, make_session, run, run_json

SID = "20260101_100000_esc00001"
HOSTILE = "colour \x1b[31mred\x1b[0m title \x1b]0;pwned\x07 clear \x1b[2J done\rover \x9b1m"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, SID, title="t\x1b[5mblink", texts=(f"needle {HOSTILE}",))
    add_message(head_store, SID, "tool", f"needle tool {HOSTILE}", tool_name="sh\x1b[1m")
    return head_store


def _assert_neutralised(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\x9b" not in text
    assert "\\x1b[31mred" in text  # shown, as its escape


@pytest.mark.parametrize("args", [["show", SID], ["show", SID, "--full"],
                                  ["search", "needle"], ["list"]])
def test_human_output_never_carries_control_characters(seeded: str, args: list[str]) -> None:
    result = run("--db", seeded, *args)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    if args[0] != "list":
        _assert_neutralised(result.stdout)


def test_json_output_keeps_the_text_exact(seeded: str) -> None:
    code, doc = run_json("--db", seeded, "show", SID)
    assert code == 0
    assert doc["messages"][0]["content"] == f"needle {HOSTILE}"
    assert doc["session"]["title"] == "t\x1b[5mblink"


def test_notes_and_previews_on_stderr_are_neutralised_too(seeded: str) -> None:
    result = run("--db", seeded, "delete", SID, "--dry-run")
    assert result.exit_code == 0
    assert "\x1b" not in result.output and "t\\x1b[5mblink" in result.output
