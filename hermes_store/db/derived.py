"""The derived objects of the head layout: search views, FTS5 indexes, CJK side tables, triggers.

The library carries its own copy of this DDL on purpose. Revisions are history: they record how
a store got here, may be superseded by later ones and must never be imported by the library.
``repair`` needs the *live* definition to put back an index, view or trigger that was dropped
(by hand, by another program, by a half-finished upgrade elsewhere). tests/test_layout_definition
compares every statement here with what a fresh upgrade to head creates, so a revision that
changes the layout without this module fails the suite.

Everything here is derived from ``messages`` and ``sessions``: recreating it loses nothing, and
the caller rebuilds the indexes afterwards (``maintenance.rebuild_indexes``), in the same
transaction. Only objects the store lacks are created; nothing that exists is dropped.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hermes_store.content import CJK_CLASS, MARKER_BYTES, marker_sql
from hermes_store.db import catalog, names

if TYPE_CHECKING:
    from sqlalchemy import Connection

# The trigram tokenizer ships with FTS5 from SQLite 3.34; revision 0015 leaves the trigram
# objects out on an older runtime, and substring search falls back to LIKE there.
TRIGRAM_AVAILABLE = sqlite3.sqlite_version_info >= (3, 34, 0)

N = names
_OUTSIDE_WINDOW = f"NOT EXISTS (SELECT 1 FROM {N.BACKFILL_WINDOW} WHERE {{id}} > lo AND {{id}} <= hi)"

# --------------------------------------------------------------------------- the text of a row
# "The text of a message" has one definition, :func:`text_of`: plain content as it is; multimodal
# content (the marker, then a JSON list of parts) reduced to its text parts, never an image or
# base64 payload; content that is neither gives ''. SQLite's text functions stop at the NUL of
# the marker, hence the BLOB casts.
#
# FTS5's own 'rebuild' and 'integrity-check' (rank=1) cannot scan a view using json_each ("SQL
# logic error" on 3.40), so the views never do: the text of a multimodal row is derived once, when
# it is written, into the side table ``hs_part_text`` (plain rows, nearly all of them, store
# nothing twice), and the index triggers derive the same text from the row at hand instead of
# reading the views, so no trigger depends on another having run first.


def _json(row: str) -> str:
    return f"CAST(substr(CAST({row}.content AS BLOB), {len(MARKER_BYTES) + 1}) AS TEXT)"


def _parts(row: str) -> str:
    body = _json(row)
    return f"""COALESCE((
            SELECT group_concat(CASE
                WHEN j.type = 'text' THEN j.value
                WHEN j.type = 'object'
                     AND COALESCE(json_extract(j.value, '$.type'), 'text')
                         IN ('text', 'input_text', 'output_text')
                     AND json_type(j.value, '$.text') = 'text'
                THEN json_extract(j.value, '$.text') END, ' ')
            FROM json_each(CASE json_type({body}) WHEN 'array' THEN {body}
                                ELSE json_array(json({body})) END) AS j), '')"""


def _part_text(row: str) -> str:
    return f"CASE WHEN json_valid({_json(row)}) THEN {_parts(row)} ELSE '' END"


def text_of(row: str) -> str:
    """SQL for the text of the ``messages`` row ``row`` (``new``, ``old``, an alias)."""
    return (f"CASE WHEN {marker_sql(row + '.content', '<>')} THEN {row}.content "
            f"WHEN {marker_sql(row + '.content')} THEN {_part_text(row)} ELSE '' END")


def _word_content(row: str) -> str:
    return (f"CASE WHEN {row}.role = 'tool' THEN substr(COALESCE({text_of(row)}, ''), 1, 8192) "
            f"ELSE {text_of(row)} END")


def _holds_cjk(text: str, tool_name: str) -> str:
    return f"({text} GLOB '*[{CJK_CLASS}]*' OR {tool_name} GLOB '*[{CJK_CLASS}]*')"


# --------------------------------------------------------------------------- views and side text

# Derives the side text of every multimodal row (revision 0022, ``repair``'s rebuild).
FILL_PART_TEXT = (f"INSERT OR REPLACE INTO {N.PART_TEXT} (id, text) "
                  f"SELECT m.id, {_part_text('m')} FROM messages AS m "
                  f"WHERE {marker_sql('m.content')}")

PART_TEXT_TABLE = f"CREATE TABLE {N.PART_TEXT} (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"
PART_TEXT_AI = f"""CREATE TRIGGER {N.PART_TEXT_AI} AFTER INSERT ON messages
WHEN {marker_sql('new.content')}
BEGIN
    INSERT OR REPLACE INTO {N.PART_TEXT} (id, text) VALUES (new.id, {_part_text('new')});
END"""
PART_TEXT_AU = f"""CREATE TRIGGER {N.PART_TEXT_AU} AFTER UPDATE OF content, id ON messages
WHEN old.content IS NOT new.content OR old.id IS NOT new.id
BEGIN
    DELETE FROM {N.PART_TEXT} WHERE id = old.id;
    INSERT OR REPLACE INTO {N.PART_TEXT} (id, text)
    SELECT new.id, {_part_text('new')} WHERE {marker_sql('new.content')};
END"""
PART_TEXT_AD = f"""CREATE TRIGGER {N.PART_TEXT_AD} AFTER DELETE ON messages BEGIN
    DELETE FROM {N.PART_TEXT} WHERE id = old.id;
END"""

SEARCH_TEXT_VIEW = f"""CREATE VIEW {N.SEARCH_TEXT} AS
SELECT m.id, m.session_id, m.role, m.tool_name, m.tool_calls,
    CASE
        WHEN {marker_sql('m.content', '<>')} THEN m.content
        ELSE COALESCE((SELECT p.text FROM {N.PART_TEXT} AS p WHERE p.id = m.id), '')
    END AS text
FROM messages AS m"""
BACKFILL_WINDOW_VIEW = f"""CREATE VIEW {N.BACKFILL_WINDOW} AS
SELECT CAST(p.value AS INTEGER) AS lo, CAST(h.value AS INTEGER) AS hi
FROM state_meta AS h JOIN state_meta AS p ON p.key = '{N.BACKFILL_PROGRESS}'
WHERE h.key = '{N.BACKFILL_HIGH_WATER}'"""
WORD_SOURCE_VIEW = f"""CREATE VIEW {N.WORD_SOURCE} AS
SELECT id,
    CASE WHEN role = 'tool' THEN substr(COALESCE(text, ''), 1, 8192) ELSE text END AS content,
    tool_name, tool_calls
FROM {N.SEARCH_TEXT}"""
# One scope for every index (docs/search.md#search-scope): every row, tool output by its prefix.
SEARCH_SCOPE_VIEW = f"""CREATE VIEW {N.SEARCH_SCOPE} AS
SELECT id, session_id,
    CASE WHEN role = 'tool' THEN substr(COALESCE(text, ''), 1, 8192) ELSE text END AS text,
    tool_name, tool_calls
FROM {N.SEARCH_TEXT}"""
# The trigram index answers CJK terms alone (Latin ones go to the word index), so it holds only
# the rows of the scope a CJK term can match: those with a CJK character in text or tool name.
TRIGRAM_SOURCE_VIEW = f"""CREATE VIEW {N.TRIGRAM_SOURCE} AS
SELECT id, text AS content, tool_name FROM {N.SEARCH_SCOPE}
WHERE {_holds_cjk('text', 'tool_name')}"""

# --------------------------------------------------------------------------- word index

_WORD_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                 "OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role "
                 "OR old.id IS NOT new.id)")


def _entry(index: str, columns: str, values: str, *, delete: bool, where: str = "") -> str:
    """The statement adding a row to ``index`` (or, with ``delete``, removing it)."""
    command, value = (f"{index}, ", "'delete', ") if delete else ("", "")
    head = f"INSERT INTO {index} ({command}rowid, {columns})\n    "
    if where:
        return f"{head}SELECT {value}{values} WHERE {where};"
    return f"{head}VALUES ({value}{values});"


def _word_entry(row: str, *, delete: bool = False) -> str:
    return _entry(N.WORD_INDEX, "content, tool_name, tool_calls",
                  f"{row}.id, {_word_content(row)}, {row}.tool_name, {row}.tool_calls",
                  delete=delete)


WORD_INDEX = f"""CREATE VIRTUAL TABLE {N.WORD_INDEX} USING fts5(
    content, tool_name, tool_calls,
    content='{N.WORD_SOURCE}', content_rowid='id'
)"""
WORD_AI = f"""CREATE TRIGGER {N.WORD_AI} AFTER INSERT ON messages
WHEN {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_word_entry('new')}
END"""
WORD_BD = f"""CREATE TRIGGER {N.WORD_BD} BEFORE DELETE ON messages
WHEN {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_word_entry('old', delete=True)}
END"""
WORD_BU = f"""CREATE TRIGGER {N.WORD_BU}
BEFORE UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN {_WORD_CHANGED} AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_word_entry('old', delete=True)}
END"""
WORD_AU = f"""CREATE TRIGGER {N.WORD_AU}
AFTER UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN {_WORD_CHANGED} AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_word_entry('new')}
END"""

# --------------------------------------------------------------------------- trigram index

_TRIGRAM_CHANGED = ("(old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name "
                    "OR old.role IS NOT new.role OR old.id IS NOT new.id)")


def _trigram_entry(row: str, *, delete: bool = False) -> str:
    return _entry(N.TRIGRAM_INDEX, "content, tool_name",
                  f"{row}.id, {_word_content(row)}, {row}.tool_name", delete=delete,
                  where=_holds_cjk(_word_content(row), f"{row}.tool_name"))


TRIGRAM_INDEX = f"""CREATE VIRTUAL TABLE {N.TRIGRAM_INDEX} USING fts5(
    content, tool_name,
    content='{N.TRIGRAM_SOURCE}', content_rowid='id', tokenize='trigram'
)"""
TRIGRAM_AI = f"""CREATE TRIGGER {N.TRIGRAM_AI} AFTER INSERT ON messages
WHEN {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_trigram_entry('new')}
END"""
TRIGRAM_BD = f"""CREATE TRIGGER {N.TRIGRAM_BD} BEFORE DELETE ON messages
WHEN {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_trigram_entry('old', delete=True)}
END"""
TRIGRAM_BU = f"""CREATE TRIGGER {N.TRIGRAM_BU}
BEFORE UPDATE OF content, tool_name, role, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="old.id")}
BEGIN
    {_trigram_entry('old', delete=True)}
END"""
TRIGRAM_AU = f"""CREATE TRIGGER {N.TRIGRAM_AU}
AFTER UPDATE OF content, tool_name, role, id ON messages
WHEN {_TRIGRAM_CHANGED} AND {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    {_trigram_entry('new')}
END"""

# --------------------------------------------------------------------- CJK bigram index

_CJK_CHANGED = _WORD_CHANGED

CJK_SIDE_TABLE = (f"CREATE TABLE {N.CJK_SIDE} "
                  "(id INTEGER PRIMARY KEY, text TEXT NOT NULL, calls TEXT)")
CJK_PENDING_TABLE = f"CREATE TABLE {N.CJK_PENDING} (id INTEGER PRIMARY KEY)"
CJK_INDEX = f"""CREATE VIRTUAL TABLE {N.CJK_INDEX} USING fts5(
    text, calls, content='{N.CJK_SIDE}', content_rowid='id'
)"""
CJK_AI = f"""CREATE TRIGGER {N.CJK_AI} AFTER INSERT ON {N.CJK_SIDE} BEGIN
    INSERT INTO {N.CJK_INDEX} (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END"""
CJK_AD = f"""CREATE TRIGGER {N.CJK_AD} AFTER DELETE ON {N.CJK_SIDE} BEGIN
    INSERT INTO {N.CJK_INDEX} ({N.CJK_INDEX}, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
END"""
CJK_AU = f"""CREATE TRIGGER {N.CJK_AU} AFTER UPDATE ON {N.CJK_SIDE} BEGIN
    INSERT INTO {N.CJK_INDEX} ({N.CJK_INDEX}, rowid, text, calls)
    VALUES ('delete', old.id, old.text, old.calls);
    INSERT INTO {N.CJK_INDEX} (rowid, text, calls) VALUES (new.id, new.text, new.calls);
END"""
CJK_PENDING_AI = f"""CREATE TRIGGER {N.CJK_PENDING_AI} AFTER INSERT ON messages
WHEN {_OUTSIDE_WINDOW.format(id="new.id")}
BEGIN
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id) VALUES (new.id);
END"""
CJK_PENDING_AU = f"""CREATE TRIGGER {N.CJK_PENDING_AU}
AFTER UPDATE OF content, tool_name, tool_calls, role, id ON messages
WHEN {_CJK_CHANGED}
BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id = old.id;
    DELETE FROM {N.CJK_PENDING} WHERE id = old.id;
    INSERT OR IGNORE INTO {N.CJK_PENDING} (id)
    SELECT new.id WHERE {_OUTSIDE_WINDOW.format(id="new.id")};
END"""
CJK_MESSAGES_AD = f"""CREATE TRIGGER {N.CJK_MESSAGES_AD} AFTER DELETE ON messages BEGIN
    DELETE FROM {N.CJK_SIDE} WHERE id = old.id;
    DELETE FROM {N.CJK_PENDING} WHERE id = old.id;
END"""

# =========================================================================== sessions: roots
# (revision 0023) Foreign writers (the agent inserts sessions rows itself) get the lineage root
# the write units give: a new row takes its parent's root, or its own id. SQLite allows no CTE
# in a trigger and, with recursive_triggers off (the default for other programs), a trigger
# does not fire itself again: a foreign relink moves the row and its children; deeper rows keep
# the old root until a write unit relinks them (``copy`` and ``recover`` recompute every root).
_PARENT_ROOT = ("(SELECT COALESCE(p.root_session_id, p.id) FROM sessions AS p "
                "WHERE p.id = new.parent_session_id)")
ROOT_AI = f"""CREATE TRIGGER hs_sessions_root_ai AFTER INSERT ON sessions
WHEN new.root_session_id IS NULL BEGIN
    UPDATE sessions SET root_session_id = COALESCE({_PARENT_ROOT}, new.id) WHERE id = new.id;
END"""
ROOT_AU = f"""CREATE TRIGGER hs_sessions_root_au AFTER UPDATE OF parent_session_id ON sessions
WHEN new.parent_session_id IS NOT old.parent_session_id BEGIN
    UPDATE sessions SET root_session_id = COALESCE({_PARENT_ROOT}, new.id)
    WHERE id = new.id OR (parent_session_id = new.id AND id <> new.id);
END"""
# =========================================================================== end sessions: roots


@dataclass(frozen=True)
class LayoutObject:
    """One schema object: its catalog type and name, and the statement creating it."""

    type: str
    name: str
    sql: str
    trigram: bool = False


# Dependency order: views read views, the CJK index reads its side table, triggers write to
# the indexes and read the views.
OBJECTS: tuple[LayoutObject, ...] = (
    LayoutObject("table", N.PART_TEXT, PART_TEXT_TABLE),
    LayoutObject("view", N.SEARCH_TEXT, SEARCH_TEXT_VIEW),
    LayoutObject("view", N.BACKFILL_WINDOW, BACKFILL_WINDOW_VIEW),
    LayoutObject("view", N.WORD_SOURCE, WORD_SOURCE_VIEW),
    LayoutObject("view", N.SEARCH_SCOPE, SEARCH_SCOPE_VIEW),
    LayoutObject("view", N.TRIGRAM_SOURCE, TRIGRAM_SOURCE_VIEW, trigram=True),
    LayoutObject("table", N.CJK_SIDE, CJK_SIDE_TABLE),
    LayoutObject("table", N.CJK_PENDING, CJK_PENDING_TABLE),
    LayoutObject("table", N.WORD_INDEX, WORD_INDEX),
    LayoutObject("table", N.TRIGRAM_INDEX, TRIGRAM_INDEX, trigram=True),
    LayoutObject("table", N.CJK_INDEX, CJK_INDEX),
    LayoutObject("trigger", N.PART_TEXT_AI, PART_TEXT_AI),
    LayoutObject("trigger", N.PART_TEXT_AU, PART_TEXT_AU),
    LayoutObject("trigger", N.PART_TEXT_AD, PART_TEXT_AD),
    LayoutObject("trigger", N.WORD_AI, WORD_AI),
    LayoutObject("trigger", N.WORD_BD, WORD_BD),
    LayoutObject("trigger", N.WORD_BU, WORD_BU),
    LayoutObject("trigger", N.WORD_AU, WORD_AU),
    LayoutObject("trigger", N.TRIGRAM_AI, TRIGRAM_AI, trigram=True),
    LayoutObject("trigger", N.TRIGRAM_BD, TRIGRAM_BD, trigram=True),
    LayoutObject("trigger", N.TRIGRAM_BU, TRIGRAM_BU, trigram=True),
    LayoutObject("trigger", N.TRIGRAM_AU, TRIGRAM_AU, trigram=True),
    LayoutObject("trigger", N.CJK_AI, CJK_AI),
    LayoutObject("trigger", N.CJK_AD, CJK_AD),
    LayoutObject("trigger", N.CJK_AU, CJK_AU),
    LayoutObject("trigger", N.CJK_PENDING_AI, CJK_PENDING_AI),
    LayoutObject("trigger", N.CJK_PENDING_AU, CJK_PENDING_AU),
    LayoutObject("trigger", N.CJK_MESSAGES_AD, CJK_MESSAGES_AD),
    # sessions: roots (0023)
    LayoutObject("trigger", N.SESSION_ROOT_AI, ROOT_AI),
    LayoutObject("trigger", N.SESSION_ROOT_AU, ROOT_AU),
)


def expected_objects(*, trigram: bool = TRIGRAM_AVAILABLE) -> tuple[LayoutObject, ...]:
    """The objects a head store has on a runtime with (or without) the trigram tokenizer."""
    return tuple(o for o in OBJECTS if trigram or not o.trigram)


def missing_objects(conn: Connection) -> list[str]:
    """Names of the head layout's derived objects absent from the store, in creation order.

    An object of the right name but another type counts as missing: it cannot serve.
    """
    present = {(o.type, o.name) for o in catalog.objects(conn)}
    return [o.name for o in expected_objects() if (o.type, o.name) not in present]


def recreate_missing(conn: Connection) -> list[str]:
    """Create the missing objects in the caller's transaction; returns their names.

    The new indexes are empty: the caller rebuilds them (``maintenance.rebuild_indexes``)
    before committing. A name taken by an object of another type makes the ``CREATE`` fail
    loudly rather than being dropped here.
    """
    missing = set(missing_objects(conn))
    created = []
    for obj in expected_objects():
        if obj.name in missing:
            conn.exec_driver_sql(obj.sql)
            created.append(obj.name)
    return created


# ---------------------------------------------------------- PostgreSQL search layout (0018, 0020)

# The configuration of the word index: ``simple`` (no stemming) with diacritics folded, as
# FTS5's unicode61 reads text.
PG_SEARCH_CONFIG = N.PG_SEARCH_CONFIG
PG_TEXT_FUNCTION = N.PG_TEXT_FUNCTION
PG_WORD_COLUMN = N.PG_WORD_COLUMN
PG_CJK_COLUMN = N.PG_CJK_COLUMN
PG_WORD_INDEX = N.PG_WORD_INDEX
PG_TRIGRAM_INDEX = N.PG_TRIGRAM_INDEX
PG_CJK_INDEX = N.PG_CJK_INDEX
PG_PENDING_INDEX = N.PG_PENDING_INDEX
# to_tsvector refuses a result above 1 MB of lexemes: the inputs are cut so that even text of
# 4-byte characters stays below it (200,000 + 1,000 + 40,000 characters).
PG_WORD_TEXT_CHARS = 200_000
# The expression the trigram index covers (and the substring route compares): the text (tool
# output by its prefix, as the word index reads it), then the tool name, on lines of their own so
# a term never spans the two. ``{t}`` is a table alias with its dot, or nothing.
PG_SCOPE_TEXT = (f"(CASE WHEN {{t}}role = 'tool' THEN left({PG_TEXT_FUNCTION}({{t}}content), 8192) "
                 f"ELSE {PG_TEXT_FUNCTION}({{t}}content) END || E'\\n' || COALESCE({{t}}tool_name, ''))")

# unicode61's separators (revision 0020): the code points FTS5's default tokenizer splits words
# at, as hex ranges: ASCII punctuation, and marks, punctuation, symbols and spaces by FTS5's own
# (older) Unicode tables. PostgreSQL's parser would keep "src/main.rs", "example.com", "3.14" or
# "a@b.org" whole; the word column's text has these turned into spaces before it is parsed, and
# a query term is cut at the same places (search.postgres). ASCII white space (tab to carriage
# return, space) is left out: the parser splits there already, and replacing every space made
# the replacement cost twice as much. tests/test_search_words.py checks every code point
# against FTS5 itself.
PG_WORD_SEPARATORS = """
0001-0008 000e-001f 0021-002f 003a-0040 005b-0060 007b-00a9 00ab-00b1 00b4 00b6-00b8 00bb 00bf 00d7
00f7 02c2-02c5 02d2-02df 02e5-02eb 02ed 02ef-02ff 0305 030d-030e 0310 0312-031a 031c-0322 0329-032c
032f 0332-036f 0375 037e 0384-0385 0387 03f6 0482-0489 055a-055f 0589-058a 058f 0591-05c7 05f3-05f4
0600-0604 0606-061b 061e-061f 064b-065f 066a-066d 0670 06d4 06d6-06e4 06e7-06ed 06fd-06fe 0700-070d
070f 0711 0730-074a 07a6-07b0 07eb-07f3 07f6-07f9 0816-0819 081b-0823 0825-0827 0829-082d 0830-083e
0859-085b 085e 08e4-08fe 0900-0903 093a-093c 093e-094f 0951-0957 0962-0965 0970 0981-0983 09bc
09be-09c4 09c7-09c8 09cb-09cd 09d7 09e2-09e3 09f2-09f3 09fa-09fb 0a01-0a03 0a3c 0a3e-0a42 0a47-0a48
0a4b-0a4d 0a51 0a70-0a71 0a75 0a81-0a83 0abc 0abe-0ac5 0ac7-0ac9 0acb-0acd 0ae2-0ae3 0af0-0af1
0b01-0b03 0b3c 0b3e-0b44 0b47-0b48 0b4b-0b4d 0b56-0b57 0b62-0b63 0b70 0b82 0bbe-0bc2 0bc6-0bc8
0bca-0bcd 0bd7 0bf3-0bfa 0c01-0c03 0c3e-0c44 0c46-0c48 0c4a-0c4d 0c55-0c56 0c62-0c63 0c7f 0c82-0c83
0cbc 0cbe-0cc4 0cc6-0cc8 0cca-0ccd 0cd5-0cd6 0ce2-0ce3 0d02-0d03 0d3e-0d44 0d46-0d48 0d4a-0d4d 0d57
0d62-0d63 0d79 0d82-0d83 0dca 0dcf-0dd4 0dd6 0dd8-0ddf 0df2-0df4 0e31 0e34-0e3a 0e3f 0e47-0e4f
0e5a-0e5b 0eb1 0eb4-0eb9 0ebb-0ebc 0ec8-0ecd 0f01-0f1f 0f34-0f3f 0f71-0f87 0f8d-0f97 0f99-0fbc
0fbe-0fcc 0fce-0fda 102b-103e 104a-104f 1056-1059 105e-1060 1062-1064 1067-106d 1071-1074 1082-108d
108f 109a-109f 10fb 135d-1368 1390-1399 1400 166d-166e 1680 169b-169c 16eb-16ed 1712-1714 1732-1736
1752-1753 1772-1773 17b4-17d6 17d8-17db 17dd 1800-180e 18a9 1920-192b 1930-193b 1940 1944-1945
19b0-19c0 19c8-19c9 19de-19ff 1a17-1a1b 1a1e-1a1f 1a55-1a5e 1a60-1a7c 1a7f 1aa0-1aa6 1aa8-1aad
1b00-1b04 1b34-1b44 1b5a-1b7c 1b80-1b82 1ba1-1bad 1be6-1bf3 1bfc-1bff 1c24-1c37 1c3b-1c3f 1c7e-1c7f
1cc0-1cc7 1cd0-1ce8 1ced 1cf2-1cf4 1dc0-1de6 1dfc-1dff 1fbd 1fbf-1fc1 1fcd-1fcf 1fdd-1fdf 1fed-1fef
1ffd-1ffe 2000-2064 206a-206f 207a-207e 208a-208e 20a0-20b9 20d0-20f0 2100-2101 2103-2106 2108-2109
2114 2116-2118 211e-2123 2125 2127 2129 212e 213a-213b 2140-2144 214a-214d 214f 2190-23f3 2400-2426
2440-244a 249c-24e9 2500-26ff 2701-2775 2794-2b4c 2b50-2b59 2ce5-2cea 2cef-2cf1 2cf9-2cfc 2cfe-2cff
2d70 2d7f 2de0-2e2e 2e30-2e3b 2e80-2e99 2e9b-2ef3 2f00-2fd5 2ff0-2ffb 3000-3004 3008-3020 302a-3030
3036-3037 303d-303f 3099-309c 30a0 30fb 3190-3191 3196-319f 31c0-31e3 3200-321e 322a-3247 3250
3260-327f 328a-32b0 32c0-32fe 3300-33ff 4dc0-4dff a490-a4c6 a4fe-a4ff a60d-a60f a66f-a67e a69f
a6f0-a6f7 a700-a716 a720-a721 a789-a78a a802 a806 a80b a823-a82b a836-a839 a874-a877 a880-a881
a8b4-a8c4 a8ce-a8cf a8e0-a8f1 a8f8-a8fa a926-a92f a947-a953 a95f a980-a983 a9b3-a9cd a9de-a9df
aa29-aa36 aa43 aa4c-aa4d aa5c-aa5f aa77-aa79 aa7b aab0 aab2-aab4 aab7-aab8 aabe-aabf aac1 aade-aadf
aaeb-aaf1 aaf5-aaf6 abe3-abed fb1e fb29 fbb2-fbc1 fd3e-fd3f fdfc-fdfd fe00-fe19 fe20-fe26 fe30-fe52
fe54-fe66 fe68-fe6b feff ff01-ff0f ff1a-ff20 ff3b-ff40 ff5b-ff65 ffe0-ffe6 ffe8-ffee fff9-ffff
10100-10102 10137-1013f 10179-10189 10190-1019b 101d0-101fd 1039f 103d0 10857 1091f 1093f
10a01-10a03 10a05-10a06 10a0c-10a0f 10a38-10a3a 10a3f 10a50-10a58 10a7f 10b39-10b3f 11000-11002
11038-1104d 11080-11082 110b0-110c1 11100-11102 11127-11134 11140-11143 11180-11182 111b3-111c0
111c5-111c8 116ab-116b7 12470-12473 16f51-16f7e 16f8f-16f92 1d000-1d0f5 1d100-1d126 1d129-1d1dd
1d200-1d245 1d300-1d356 1d6c1 1d6db 1d6fb 1d715 1d735 1d74f 1d76f 1d789 1d7a9 1d7c3 1eef0-1eef1
1f000-1f02b 1f030-1f093 1f0a0-1f0ae 1f0b1-1f0be 1f0c1-1f0cf 1f0d1-1f0df 1f110-1f12e 1f130-1f16b
1f170-1f19a 1f1e6-1f202 1f210-1f23a 1f240-1f248 1f250-1f251 1f300-1f320 1f330-1f335 1f337-1f37c
1f380-1f393 1f3a0-1f3c4 1f3c6-1f3ca 1f3e0-1f3f0 1f400-1f43e 1f440 1f442-1f4f7 1f4f9-1f4fc
1f500-1f53d 1f540-1f543 1f550-1f567 1f5fb-1f640 1f645-1f64f 1f680-1f6c5 1f700-1f773 e0001
e0020-e007f e0100-e01ef
"""
PG_WORD_TEXT_FUNCTION = N.PG_WORD_TEXT_FUNCTION


def _escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _separator_class(table: str) -> str:
    ranges = (item.partition("-") for item in table.split())
    return "".join(_escape(int(lo, 16)) + (f"-{_escape(int(hi, 16))}" if hi else "")
                   for lo, _, hi in ranges)


# The body of a bracket expression of the separators, in \u/\U escapes: Python's ``re`` and
# PostgreSQL's regular expressions read it alike. With ASCII white space it is every separator.
PG_SEPARATOR_CLASS = _separator_class(PG_WORD_SEPARATORS)
PG_ASCII_SPACE_CLASS = "\\t-\\r "
# The word column's text: each run of separators one space. The text is cut before, and a
# replaced run is never shorter than its space, so the bounds above still hold. The pattern is an
# E'' string, whose escapes mean the same whatever standard_conforming_strings says.
_SQL_SEPARATORS = PG_SEPARATOR_CLASS.replace("\\", "\\\\")
_WORD_TEXT_SQL = f"""CREATE FUNCTION {PG_WORD_TEXT_FUNCTION}(content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT regexp_replace(content, E'[{_SQL_SEPARATORS}]+', ' ', 'g')
$$"""

PG_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("extension", "CREATE EXTENSION IF NOT EXISTS pg_trgm"),
    ("extension", "CREATE EXTENSION IF NOT EXISTS unaccent"),
    ("config", f"CREATE TEXT SEARCH CONFIGURATION {PG_SEARCH_CONFIG} (COPY = simple)"),
    ("config", f"""ALTER TEXT SEARCH CONFIGURATION {PG_SEARCH_CONFIG}
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
    WITH unaccent, simple"""),
    ("function", """CREATE FUNCTION hs_search_text(content text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    doc jsonb;
BEGIN
    IF content IS NULL THEN
        RETURN '';
    END IF;
    IF left(content, 7) IS DISTINCT FROM U&'\\FFFF' || '0json:' THEN
        RETURN content;
    END IF;
    BEGIN
        doc := substr(content, 8)::jsonb;
    EXCEPTION WHEN others THEN
        RETURN '';
    END;
    IF jsonb_typeof(doc) <> 'array' THEN
        doc := jsonb_build_array(doc);
    END IF;
    RETURN COALESCE((
        SELECT string_agg(CASE
            WHEN jsonb_typeof(e) = 'string' THEN e #>> '{}'
            WHEN jsonb_typeof(e) = 'object'
                 AND COALESCE(e ->> 'type', 'text') IN ('text', 'input_text', 'output_text')
                 AND jsonb_typeof(e -> 'text') = 'string'
            THEN e ->> 'text' END, ' ' ORDER BY n)
        FROM jsonb_array_elements(doc) WITH ORDINALITY AS t(e, n)), '');
END
$$"""),
    ("function", _WORD_TEXT_SQL),
    (PG_WORD_COLUMN, f"ALTER TABLE messages ADD COLUMN {PG_WORD_COLUMN} tsvector "
     f"""GENERATED ALWAYS AS (
    to_tsvector('{PG_SEARCH_CONFIG}'::regconfig, {PG_WORD_TEXT_FUNCTION}(left(CASE WHEN role = 'tool'
        THEN left({PG_TEXT_FUNCTION}(content), 8192)
        ELSE {PG_TEXT_FUNCTION}(content) END, {PG_WORD_TEXT_CHARS})))
    || to_tsvector('{PG_SEARCH_CONFIG}'::regconfig,
        {PG_WORD_TEXT_FUNCTION}(left(COALESCE(tool_name, ''), 1000)))
    || to_tsvector('{PG_SEARCH_CONFIG}'::regconfig,
        {PG_WORD_TEXT_FUNCTION}(left(COALESCE(tool_calls, ''), 40000)))
) STORED"""),
    (PG_CJK_COLUMN, f"ALTER TABLE messages ADD COLUMN {PG_CJK_COLUMN} tsvector"),
    (PG_WORD_INDEX, f"CREATE INDEX {PG_WORD_INDEX} ON messages USING gin ({PG_WORD_COLUMN})"),
    (PG_TRIGRAM_INDEX, f"""CREATE INDEX {PG_TRIGRAM_INDEX} ON messages USING gin (
    {PG_SCOPE_TEXT.format(t="")} gin_trgm_ops)"""),
    (PG_CJK_INDEX, f"CREATE INDEX {PG_CJK_INDEX} ON messages USING gin ({PG_CJK_COLUMN})"),
    (PG_PENDING_INDEX, f"""CREATE INDEX {PG_PENDING_INDEX} ON messages (id)
    WHERE {PG_CJK_COLUMN} IS NULL"""),
)
