"""The stored-message format has one owner (hermes_store/content.py): the marker, the cell
codecs, the plain text of a stored content, the tool-call counting rule and the sane-time window."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_store import content
from hermes_store.content import (
    MARKER_BLOB_SQL,
    MULTIMODAL_PREFIX,
    calls_of,
    decode_content,
    decode_tool_calls,
    encode_content,
    encode_tool_calls,
    iso_utc,
    marker_sql,
    sane_time,
    text_of,
    tool_calls_added,
)
from hermes_store.db import derived
from hermes_store.search import sqlite as search_sql

PACKAGE = Path(content.__file__).resolve().parent
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def multimodal(parts: object) -> str:
    return MULTIMODAL_PREFIX + json.dumps(parts)


# --------------------------------------------------------------------------- the marker in SQL


def test_the_marker_blob_literal_is_the_marker_bytes() -> None:
    assert MARKER_BLOB_SQL == "X'006A736F6E3A'"
    assert bytes.fromhex(MARKER_BLOB_SQL[2:-1]) == MULTIMODAL_PREFIX.encode()


def test_sql_that_tells_multimodal_from_text_renders_the_one_marker() -> None:
    assert marker_sql("c") == "substr(CAST(c AS BLOB), 1, 6) = X'006A736F6E3A'"
    assert marker_sql("m.content", "<>") in derived.SEARCH_TEXT_VIEW
    assert all(marker_sql(f"{t}.content") in text for t, text in search_sql._CONTEXT_TEXT.items())


def test_no_module_of_the_package_types_the_marker_as_hex() -> None:
    # Migration revisions keep their own copy on purpose: they never import the package.
    typed = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if "migrations" not in p.parts and "006a736f6e3a" in p.read_text().lower()]
    assert typed == []


def test_the_search_view_and_text_of_agree_on_every_shape(head_db: Path) -> None:
    contents = [
        "plain", "", None, multimodal([{"type": "text", "text": "look"}, IMAGE]),
        multimodal([{"type": "input_text", "text": "a"}, "b",
                    {"type": "output_text", "text": "c"}]),
        multimodal([{"type": "thinking", "text": "secret"}]), multimodal({"text": "one part"}),
        multimodal([IMAGE]), MULTIMODAL_PREFIX + "{not json", multimodal("just a string"),
        multimodal([{"type": "text", "text": 7}, {"type": "text", "text": "部署"}]),
    ]
    con = sqlite3.connect(head_db)
    with con:
        con.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        con.executemany("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('s', 'user', ?, 1)", [(c,) for c in contents])
    texts = [r[0] for r in con.execute("SELECT text FROM hs_search_text ORDER BY id")]
    con.close()
    assert [text_of(c) for c in contents] == [t or "" for t in texts]


# --------------------------------------------------------------------------- content codec


@pytest.mark.parametrize("value", [
    "plain", "", "\x00json:looks like the marker", [{"type": "text", "text": "hi"}, IMAGE],
    {"type": "text", "text": "one"}, None,
])
def test_content_reads_back_as_it_was_given(value: object) -> None:
    assert decode_content(encode_content(value)) == value


def test_text_starting_with_the_marker_is_never_read_as_parts() -> None:
    stored = encode_content("\x00json:[1]")
    assert stored is not None and stored != "\x00json:[1]"
    assert text_of(stored, display=True) == "\x00json:[1]"


def test_the_search_text_of_text_starting_with_the_marker_holds_its_words_and_no_nul() -> None:
    stored = encode_content("\x00json:hello zebrafish")
    assert text_of(stored) == "hello zebrafish"
    assert decode_content(stored) == "\x00json:hello zebrafish"


def test_what_older_versions_stored_for_text_starting_with_the_marker_still_reads_back() -> None:
    assert decode_content('\x00json:"\\u0000json:hi"') == "\x00json:hi"


def test_a_content_dict_carrying_the_marked_text_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="hermes_marked_str"):
        encode_content({"type": "text", "text": "x", "hermes_marked_str": True})


def test_content_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError, match="content must be"):
        encode_content(42)


def test_a_lone_surrogate_in_parts_is_refused_rather_than_escaped() -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        encode_content([{"type": "text", "text": "\ud800"}])


def test_a_broken_payload_decodes_to_the_stored_text() -> None:
    assert decode_content(MULTIMODAL_PREFIX + "{oops") == MULTIMODAL_PREFIX + "{oops"


# --------------------------------------------------------------------------- text_of


def test_displayed_text_shows_every_part_a_line_and_images_as_a_marker() -> None:
    stored = multimodal(["first", {"type": "text", "text": "second"}, IMAGE,
                         {"type": "summary_text", "text": "third"}, {"type": "tool_use"}])
    assert text_of(stored, display=True) == "first\nsecond\n[image]\nthird"
    assert text_of(stored, display=True, image_text="[image omitted]") == \
        "first\nsecond\n[image omitted]\nthird"
    # What the search indexes hold: text parts only, on one line.
    assert text_of(stored) == "first second"


def test_displayed_text_of_a_broken_payload_is_its_raw_text_never_the_marker() -> None:
    assert text_of(MULTIMODAL_PREFIX + "{oops", display=True) == "{oops"
    assert text_of(MULTIMODAL_PREFIX + "{oops") == ""


def test_text_of_an_undecodable_cell_decodes_its_bytes() -> None:
    assert text_of(b"caf\xe9", display=True) == "caf\ufffd"
    assert text_of(multimodal(["a", "b"]).encode(), display=True) == "a\nb"
    assert text_of(None, display=True) == "" and text_of(12, display=True) == "12"


# --------------------------------------------------------------------------- tool calls


CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


@pytest.mark.parametrize(("role", "calls", "added"), [
    ("assistant", [CALL, CALL], 2),
    ("assistant", json.dumps([CALL]), 1),
    ("assistant", {"id": "c3"}, 1),
    ("assistant", "not json", 1),
    ("assistant", "[]", 0),
    ("assistant", "null", 0),
    ("assistant", [], 0),
    ("assistant", None, 0),
    ("assistant", "", 0),
    ("tool", [CALL], 0),
])
def test_what_a_message_adds_to_the_tool_call_count(role: str, calls: object,
                                                    added: int) -> None:
    assert tool_calls_added(role, calls) == added
    stored, count = encode_tool_calls(calls)
    assert tool_calls_added(role, stored) == added  # the stored cell counts as the value did
    assert count == tool_calls_added("assistant", calls)


def test_tool_calls_read_back_and_broken_json_reads_as_no_calls() -> None:
    stored, _ = encode_tool_calls([CALL])
    assert decode_tool_calls(stored) == [CALL]
    assert decode_tool_calls("{broken") == []


@pytest.mark.parametrize(("stored", "calls"), [
    (json.dumps([CALL]), [{"id": "c1", "name": "ls", "arguments": "{}"}]),
    (json.dumps({"call_id": "c2", "name": "Bash", "input": {"cmd": "ls"}}),
     [{"id": "c2", "name": "Bash", "arguments": {"cmd": "ls"}}]),
    ("not json", [{"id": None, "name": "unknown", "arguments": "not json"}]),
    (json.dumps([1, {"function": {}}]), [{"id": None, "name": "unknown", "arguments": None}]),
    (None, []), ("", []),
])
def test_calls_of_reads_every_shape_for_display(stored: object, calls: list[object]) -> None:
    assert calls_of(stored) == calls


# --------------------------------------------------------------------------- times


def test_only_plausible_times_are_sane() -> None:
    now = time.time()
    assert sane_time(now) == now and sane_time(946684800) == 946684800.0
    for bad in (5e246, 946684799.0, now + 2 * 86400, float("nan"), True, "1780000000", None):
        assert sane_time(bad) is None
    assert iso_utc(1_780_000_000.25) == "2026-05-28T20:26:40Z"
    assert iso_utc(1_780_000_000.25, millis=True) == "2026-05-28T20:26:40.250Z"
    assert iso_utc(5e246) is None
