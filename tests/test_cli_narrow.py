"""Narrow terminals and snippets: list rows and hit lines fit the width (times shorten to their
age); a terminal gets hits in bold, a pipe between markers; --json/--nl/--csv carry plain text
plus each hit's offsets, the markers only with --markers."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_support import make_session, run

LONG = "borrow checker " + "lorem ipsum dolor " * 20 + " borrow"


@pytest.fixture
def seeded(head_store: str) -> str:
    for i in range(3):
        make_session(head_store, f"20260801_1200{i:02d}_aaaa{i:02d}",
                     title=f"A rather long title that would wrap a narrow terminal {i}",
                     texts=(LONG,))
    return head_store


@pytest.mark.parametrize("columns", [60, 40])
@pytest.mark.parametrize("args", [["list"], ["search", "borrow"], ["stats"]],
                         ids=lambda a: a[0])
def test_every_line_fits_the_terminal(seeded: str, args: list[str], columns: int) -> None:
    """Every line fits but one holding a single word longer than the line: ids and paths are
    printed whole (``show`` takes the id), on a line of their own."""
    from rich.cells import cell_len

    result = run("--db", seeded, *args, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    wide = [line for line in result.stdout.splitlines()
            if cell_len(line) > columns and len(line.split()) > 1]
    assert not wide, result.stdout
    if args[0] != "stats":
        assert "ago" in result.stdout


def test_json_snippets_are_plain_text_with_offsets(seeded: str) -> None:
    doc = json.loads(run("--json", "--db", seeded, "search", "borrow").stdout)
    hit = doc["results"][0]["hits"][0]
    assert ">>>" not in hit["snippet"] and hit["matches"]
    for start, end in hit["matches"]:
        assert hit["snippet"][start:end].lower() == "borrow"
    marked = json.loads(run("--json", "--db", seeded, "search", "borrow", "--markers").stdout)
    assert ">>>borrow<<<" in marked["results"][0]["hits"][0]["snippet"]


def test_csv_snippets_are_plain_text_with_offsets(seeded: str) -> None:
    rows = list(csv.DictReader(io.StringIO(run("--db", seeded, "search", "borrow",
                                               "--csv").stdout)))
    assert ">>>" not in rows[0]["snippet"] and json.loads(rows[0]["matches"])


def test_a_terminal_gets_bold_hits_not_markers() -> None:
    from hermes_store.cli.browse import _snippet_line

    line = _snippet_line("    user  ", "say >>>borrow<<< twice", bold=True)
    assert ">>>" not in line.plain and "borrow" in line.plain
    assert [(line.plain[s.start:s.end], str(s.style)) for s in line.spans] == [
        ("borrow", "bold")]


def test_stats_at_sixty_columns_prints_every_name_whole(seeded: str) -> None:
    doc = json.loads(run("--json", "--db", seeded, "stats").stdout)
    names = [item["name"] for item in doc["space"].get("items") or []]
    result = run("--db", seeded, "stats", env={"COLUMNS": "60"})
    assert result.exit_code == 0 and names
    for name in names:  # never cut into look-alikes ("messages_fts_…" twice)
        assert name in result.stdout, name
