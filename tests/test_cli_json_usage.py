"""``--json`` means one JSON document on stdout, usage errors click finds included: a bad
value, an unknown option or command, a missing argument, with ``--json`` before or after the
command's name. Without ``--json`` click's own text stays."""

from __future__ import annotations

import json

import pytest
from cli_support import run


@pytest.mark.parametrize(("args", "command", "says"), [
    (["--json", "search", "x", "--limit", "0"], "search", "--limit"),
    (["search", "x", "--limit", "0", "--json"], "search", "--limit"),
    (["--json", "--bogus", "stats"], "stats", "--bogus"),
    (["stats", "--json", "--bogus"], "stats", "--bogus"),
    (["--json", "nosuch"], None, "nosuch"),
    (["--json", "show"], "show", "SESSION"),
    (["--json", "list", "--limit", "many"], "list", "--limit"),
])
def test_a_usage_error_with_json_is_one_json_document(tmp_path, args, command, says) -> None:
    result = run("--db", str(tmp_path / "state.db"), *args)
    assert result.exit_code == 2
    doc = json.loads(result.stdout)  # the whole of stdout is one document
    assert doc["ok"] is False and doc["command"] == command
    assert doc["error"]["code"] == "usage" and says in doc["error"]["message"]


def test_without_json_a_usage_error_is_clicks_text(tmp_path) -> None:
    result = run("--db", str(tmp_path / "state.db"), "search", "x", "--limit", "0")
    assert result.exit_code == 2 and result.stdout == ""
    assert "Usage:" in result.stderr


def test_json_after_a_double_dash_is_a_search_word(tmp_path) -> None:
    result = run("--db", str(tmp_path / "state.db"), "search", "--limit", "0", "--", "--json")
    assert result.exit_code == 2 and result.stdout == ""
