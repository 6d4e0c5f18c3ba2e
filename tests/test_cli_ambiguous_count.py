"""An ambiguous prefix names how many sessions it really matches, not how many are shown."""

from __future__ import annotations

from cli_support import make_session, run, run_json


def test_an_ambiguous_prefix_says_the_true_number(head_store: str) -> None:
    for i in range(14):
        make_session(head_store, f"20260801_1200{i:02d}_aaaa{i:02d}")
    code, doc = run_json("--db", head_store, "show", "2026")
    assert code == 4
    assert "matches 14 sessions" in doc["error"]["message"]
    assert doc["error"]["total"] == 14 and len(doc["error"]["candidates"]) == 10
    result = run("--db", head_store, "show", "20260801_12000")
    assert result.exit_code == 4 and "matches 10 sessions;" in result.stderr
