"""hermes-store list as a table: one line a session at any width, ids never cut, no column
that only ever holds nothing."""

from __future__ import annotations

import pytest
from cli_support import make_session, run

LONG = "Fix the flaky login test in the gateway service after the websocket refactor landed"
IDS = [f"20260101_1000{i:02d}_abcd{i:04d}" for i in range(5)]


@pytest.fixture
def seeded(head_store: str) -> str:
    for i, sid in enumerate(IDS):
        make_session(head_store, sid, age_days=i + 1, title=f"{LONG} #{i}" if i % 2 else None,
                     texts=(f"{LONG} and a preview that is long as well, number {i}",))
    return head_store


def _list(store: str, columns: int, *args: str) -> list[str]:
    result = run("--db", store, "list", *args, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_each_session_is_one_line_within_the_terminal_width(seeded: str, columns: int) -> None:
    lines = _list(seeded, columns)
    assert len(lines) == 1 + len(IDS)  # a header, then one line a session
    assert all(len(line) <= columns for line in lines)
    for sid in IDS:
        assert sum(sid in line for line in lines) == 1  # whole, on its own line


def test_a_column_that_is_empty_for_every_row_is_left_out(seeded: str) -> None:
    header = _list(seeded, 100)[0].split()
    assert "workspace" not in header
    make_session(seeded, "20260101_110000_wkspace1", extra={"cwd": "/home/ana/app"})
    header = _list(seeded, 100)[0].split()
    assert "workspace" in header
