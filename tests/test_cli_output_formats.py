"""Output formats for scripts: --nl (one JSON object a line), --csv, --tsv and --no-headers on
list, search and show; --json stays the one-document envelope."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_support import add_message, make_session, run

from hermes_store.cli.render import ITEM_KEYS

A = "20260101_100000_aaaa1111"
B = "20260102_100000_bbbb2222"


@pytest.fixture
def seeded(head_store: str) -> str:
    make_session(head_store, A, age_days=3, title="Tabs\there, and a comma",
                 texts=("needle one\nsecond line",))
    make_session(head_store, B, age_days=1, source="telegram", texts=("needle two",))
    add_message(head_store, B, "assistant", "needle reply")
    return head_store


def _out(store: str, *args: str) -> str:
    result = run("--db", store, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_list_nl_is_one_session_item_a_line(seeded: str) -> None:
    lines = _out(seeded, "list", "--nl").splitlines()
    items = [json.loads(line) for line in lines]
    assert [i["id"] for i in items] == [B, A]
    assert all(set(ITEM_KEYS) <= set(i) for i in items)


def test_list_csv_has_a_header_unless_no_headers(seeded: str) -> None:
    rows = list(csv.reader(io.StringIO(_out(seeded, "list", "--csv"))))
    assert rows[0][:3] == ["id", "title", "source"] and len(rows) == 3
    assert rows[2][1] == "Tabs\there, and a comma"
    bare = list(csv.reader(io.StringIO(_out(seeded, "list", "--csv", "--no-headers"))))
    assert bare == rows[1:]


def test_tsv_keeps_one_record_a_line_by_escaping(seeded: str) -> None:
    lines = _out(seeded, "list", "--tsv").splitlines()
    assert len(lines) == 3
    header = lines[0].split("\t")
    title = lines[2].split("\t")[header.index("title")]
    assert title == "Tabs\\there, and a comma"
    show = _out(seeded, "show", A, "--tsv", "--no-headers").splitlines()
    assert len(show) == 1 and "needle one\\nsecond line" in show[0]


def test_search_rows_are_hits_and_show_rows_are_messages(seeded: str) -> None:
    hits = [json.loads(line) for line in _out(seeded, "search", "needle", "--nl").splitlines()]
    assert len(hits) == 3 and {h["session_id"] for h in hits} == {A, B}
    assert {"message_id", "role", "snippet", "title"} <= set(hits[0])
    rows = list(csv.DictReader(io.StringIO(_out(seeded, "show", B, "--csv"))))
    assert [r["content"] for r in rows] == ["needle two", "needle reply"]


def test_the_table_can_drop_its_header(seeded: str) -> None:
    lines = _out(seeded, "list", "--no-headers").splitlines()
    assert len(lines) == 2 and B in lines[0]


def test_two_output_formats_at_once_are_a_usage_error(seeded: str) -> None:
    assert run("--db", seeded, "--json", "list", "--nl").exit_code == 2
    assert run("--db", seeded, "list", "--csv", "--tsv").exit_code == 2
