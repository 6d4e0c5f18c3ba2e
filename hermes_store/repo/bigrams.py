"""CJK bigram index maintenance (docs/search.md#cjk-bigrams; layout in revision 0016).

``sync_messages(conn, ids)`` brings the side rows of the given messages up to date inside the
caller's transaction: the writer inserts or updates messages, the ``messages`` triggers record
the ids in ``hs_cjk_pending``, and this derives the bigram text (:func:`cjk_bigram_text`),
writes ``hs_cjk`` (whose own triggers keep ``hs_fts_cjk`` in step) and clears the ids.
Rows written by other programs stay pending until :func:`catch_up` runs; search covers them
meanwhile with a LIKE bounded to the pending ids. Until the index exists it does nothing.

On PostgreSQL (revision 0018) there are no triggers and no side table: the same tokens live in
the ``messages.hs_search_cjk`` tsvector, written with the row itself (:func:`with_vector`, so an
append is one INSERT, never an INSERT and an UPDATE of an indexed column). The literal is built
here (:func:`cjk_vector`), because the text-search parser would drop the private-use end mark;
tokens are cut and casefolded as unicode61 cuts and folds them, and a query is mapped onto them
by :func:`tsquery_phrase`. NULL marks a row another program wrote (pending); ``''`` a row the
library saw that has no CJK character.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from array import array
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from hermes_store.content import CJK_CLASS, text_of
from hermes_store.db import catalog, names
from hermes_store.db.sqlite_driver import dbapi_of

if TYPE_CHECKING:
    from sqlalchemy import Connection, Table, TableClause
    from sqlalchemy.orm import Session

# The query parser (search.language) reads this module's CJK classes on every search, SQLite
# reading commands included, which load no SQLAlchemy: db.dialect and the models load on first
# use by a statement below.
PG = "postgresql"


def dialect_name(conn: Connection | Session) -> str:
    from hermes_store.db.dialect import dialect_name as name

    return name(conn)


def has_fts5(conn: Connection | Session) -> bool:
    from hermes_store.db.dialect import has_fts5 as fts5

    return fts5(conn)

# Private-use mark closing a CJK run in the bigram text. Private use (Co) is a token character for
# unicode61, so "端" + mark stays one token that no real text produces.
BIGRAM_END = "\ue000"

# --- CJK character classes -----------------------------------------------------------------------

_CJK_RE = re.compile(f"[{CJK_CLASS}]")
# Letters only: U+3000-303F is excluded by the contract, and the few kana-block code points that
# are punctuation or spacing marks (゛゜゠・) are left out so a run never holds a separator.
CJK_RUN_RE = re.compile(
    "[\u3041-\u309a\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
    "\U00020000-\U0002a6df\U0002a700-\U0002ebef]+"
)


def _separators() -> str:
    """Characters unicode61 surely splits at: ASCII other than letters and digits, and the
    punctuation and spaces of the blocks CJK text mixes with (assigned long before the Unicode
    6.1 tables FTS5 reads)."""
    ascii_ = "".join(chr(c) for c in range(128) if not chr(c).isalnum())
    blocks = (range(0xA0, 0xC0), range(0x2000, 0x2070), range(0x3000, 0x3040),
              range(0xFF00, 0xFF66))
    wide = "".join(chr(c) for block in blocks for c in block
                   if unicodedata.category(chr(c))[0] in "PZ")
    return re.escape(ascii_ + wide)


_RUN_CLASS = CJK_RUN_RE.pattern[1:-2]
_SEPARATORS = _separators()
# A CJK letter next to a character that is neither CJK nor surely a separator: unicode61 may keep
# both in one token, so the Latin part is a word of the bigram text alone. Errs towards "glued".
_GLUED_RE = re.compile(f"[{_RUN_CLASS}][^{_RUN_CLASS}{_SEPARATORS}]"
                       f"|[^{_RUN_CLASS}{_SEPARATORS}][{_RUN_CLASS}]")


def glued(text: str | None) -> bool:
    """True when ``text`` may hold a run of other letters or digits glued to CJK letters (as in
    ``修改youer服务端``), which only the bigram index splits into words of their own."""
    return text is not None and _GLUED_RE.search(text) is not None


def contains_cjk(text: str | None) -> bool:
    """True when ``text`` holds a CJK character (the set of docs/search.md#cjk-bigrams)."""
    return text is not None and _CJK_RE.search(text) is not None


# The bigram text is rebuilt on every appended message, so the pieces of all runs are made in
# one pass over an array of code points instead of one Python-level string per piece.
_RUN_SPLIT_RE = re.compile(f"({CJK_RUN_RE.pattern})")
_UNIT = next(code for code in "IL" if array(code).itemsize == 4)
_UNIT_CODEC = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"


def _all_run_pieces(runs: list[str]) -> list[str]:
    """For each run, "ab bc cd d" + BIGRAM_END: each char followed by its successor or the mark."""
    chars = array(_UNIT)
    chars.frombytes("".join(runs).encode(_UNIT_CODEC))
    successors = chars[1:]
    successors.append(0)
    ends = list(accumulate(map(len, runs)))
    for end in ends:
        successors[end - 1] = ord(BIGRAM_END)
    out = array(_UNIT, [ord(" ")]) * (3 * len(chars))
    out[0::3] = chars
    out[1::3] = successors
    flat = out.tobytes().decode(_UNIT_CODEC)
    # One start more than ends: the last (past the final end) pairs with nothing.
    return [flat[3 * start : 3 * end - 1] for start, end in zip([0, *ends], ends, strict=False)]


def cjk_bigram_text(text: str | None) -> str:
    """The derived text the bigram index stores: CJK runs as pieces, other text as words."""
    if not text:
        return ""
    parts = _RUN_SPLIT_RE.split(text)  # non-CJK text at even indexes, runs at odd ones
    parts[0::2] = map(str.strip, parts[0::2])
    if len(parts) > 1:
        parts[1::2] = _all_run_pieces(parts[1::2])
    return " ".join(filter(None, parts))



# Extra pending rows a writer drains on its way, so rows written by other programs catch up
# without a maintenance run, at a bounded cost per append.
OPPORTUNISTIC_DRAIN = 32
CATCH_UP_CHUNK = 500

# The backfill window (revision 0013) is indexed by the backfill alone; a writer leaves it.
_DELETE_SIDE = (
    "DELETE FROM hs_cjk WHERE id IN (SELECT value FROM json_each(?)) "
    f"AND NOT {catalog.in_backfill_window('id')}"
)
_SCOPE_ROWS = (
    "SELECT id, text, tool_name, tool_calls FROM hs_search_scope "
    "WHERE id IN (SELECT value FROM json_each(?)) "
    f"AND NOT {catalog.in_backfill_window('id')}"
)
_SCOPE_RANGE = (
    "SELECT id, text, tool_name, tool_calls FROM hs_search_scope WHERE id > ? AND id <= ?"
)
_DELETE_RANGE = "DELETE FROM hs_cjk WHERE id > ? AND id <= ?"
_CLEAR_PENDING_RANGE = "DELETE FROM hs_cjk_pending WHERE id > ? AND id <= ?"
_INSERT_SIDE = "INSERT OR REPLACE INTO hs_cjk (id, text, calls) VALUES (?, ?, ?)"
_CLEAR_PENDING = "DELETE FROM hs_cjk_pending WHERE id IN (SELECT value FROM json_each(?))"
_PENDING_IDS = "SELECT id FROM hs_cjk_pending ORDER BY id LIMIT ?"
_PENDING_COUNT = "SELECT count(*) FROM hs_cjk_pending"


# Once a side row holds Latin glued to CJK, Latin terms read the bigram index too (revision 0025).
MARK_GLUED = (f"INSERT INTO state_meta (key, value) VALUES ('{names.CJK_GLUED_LATIN}', '1') "
               "ON CONFLICT (key) DO UPDATE SET value = '1' WHERE value IS NOT '1'")


def side_row(text: str | None, tool_name: str | None,
             tool_calls: str | None) -> tuple[str, str | None] | None:
    """The ``(text, calls)`` a covered row stores, or ``None`` when it has no CJK character."""
    if not (contains_cjk(text) or contains_cjk(tool_name)):
        return None
    derived = cjk_bigram_text(" ".join(t for t in (text, tool_name) if t))
    return derived, tool_calls


def _glued_row(text: str | None, tool_name: str | None) -> bool:
    return glued(text) or glued(tool_name)


def has_index(conn: Connection) -> bool:
    # Cached only once seen: the table never goes away again, while a migration may create it.
    if conn.info.get("hermes_cjk_index"):
        return True
    if dialect_name(conn) == PG:
        found = catalog.search_layout(conn).bigram
        if found:
            conn.info["hermes_cjk_index"] = True
        return found
    if not has_fts5(conn):
        return False
    found = catalog.has_table(conn, catalog.CJK_SIDE_TABLE)
    if found:
        conn.info["hermes_cjk_index"] = True
    return found


def _write(conn: Connection,
           rows: Iterable[tuple[int, str | None, str | None, str | None]]) -> None:
    """Derive and insert the side rows of ``(id, content, tool_name, tool_calls)`` rows."""
    values = []
    any_glued = False
    for row_id, text, tool_name, tool_calls in rows:
        side = side_row(text, tool_name, tool_calls)
        if side is not None:
            values.append((row_id, *side))
            any_glued = any_glued or _glued_row(text, tool_name)
    if values:
        conn.exec_driver_sql(_INSERT_SIDE, values)
    if any_glued:
        conn.exec_driver_sql(MARK_GLUED)


def _sync(conn: Connection, ids: list[int]) -> None:
    batch = json.dumps(ids)
    conn.exec_driver_sql(_DELETE_SIDE, (batch,))
    _write(conn, conn.exec_driver_sql(_SCOPE_ROWS, (batch,)).all())
    conn.exec_driver_sql(_CLEAR_PENDING, (batch,))


# One message (every append) takes the same steps with ``id = ?`` on the driver cursor:
# SQLAlchemy's per-statement cost was most of an append's fixed cost.
_DELETE_SIDE_ONE = f"DELETE FROM hs_cjk WHERE id = ? AND NOT {catalog.in_backfill_window('id')}"
_SCOPE_ROW = ("SELECT text, tool_name, tool_calls FROM hs_search_scope WHERE id = ? "
              f"AND NOT {catalog.in_backfill_window('id')}")
_CLEAR_PENDING_ONE = "DELETE FROM hs_cjk_pending WHERE id = ?"


def _sync_one(conn: Connection, row_id: int) -> list[int]:
    """:func:`_sync` of one id; returns the pending ids a writer drains on its way."""
    cursor = dbapi_of(conn.connection).cursor()
    try:
        cursor.execute(_DELETE_SIDE_ONE, (row_id,))
        found = cursor.execute(_SCOPE_ROW, (row_id,)).fetchone()
        side = side_row(*found) if found is not None else None
        if side is not None:
            cursor.execute(_INSERT_SIDE, (row_id, *side))
            if _glued_row(found[0], found[1]):
                cursor.execute(MARK_GLUED)
        cursor.execute(_CLEAR_PENDING_ONE, (row_id,))
        return [r[0] for r in cursor.execute(_PENDING_IDS, (OPPORTUNISTIC_DRAIN,))]
    finally:
        cursor.close()


def sync_messages(conn: Connection, ids: Iterable[int]) -> None:
    """Derive and store the bigram rows of these messages (no-op until the index exists).

    On PostgreSQL the rows already carry their tokens (:func:`with_vector`): nothing to do."""
    wanted = sorted({int(i) for i in ids})
    if not wanted or dialect_name(conn) == PG or not has_index(conn):
        return
    if len(wanted) == 1:
        extra = _sync_one(conn, wanted[0])
    else:
        _sync(conn, wanted)
        extra = [r[0] for r in conn.exec_driver_sql(_PENDING_IDS, (OPPORTUNISTIC_DRAIN,))]
    if extra:
        _sync(conn, extra)


def catch_up(conn: Connection, limit: int = CATCH_UP_CHUNK) -> int:
    """Index up to ``limit`` pending rows; returns how many were taken off the pending list."""
    if not has_index(conn):
        return 0
    if dialect_name(conn) == PG:
        return _pg_catch_up(conn, limit)
    pending = [r[0] for r in conn.exec_driver_sql(_PENDING_IDS, (limit,))]
    if pending:
        _sync(conn, pending)
    return len(pending)


def pending_count(conn: Connection) -> int:
    if not has_index(conn):
        return 0
    sql = _PG_PENDING_COUNT if dialect_name(conn) == PG else _PENDING_COUNT
    return int(conn.exec_driver_sql(sql).scalar() or 0)


# Covered rows that should have a side row (a CJK character) and have neither it nor a pending
# mark: derived data lost (docs/search.md#damage). Rows inside the backfill window are the
# backfill's. Parameters: whether to read each text whole, else how much of its start (the
# bounded check), where to start (after the newest side row, for the bounded check), how many.
# The CJK test is in SQL so that the bounded check's LIMIT counts rows holding CJK text: the
# scope covers every row, and the first rows after the newest side row may hold none.
_UNCOVERED = (
    "SELECT id, t, tool_name FROM ("
    "SELECT s.id, CASE WHEN ? THEN s.text ELSE substr(s.text, 1, ?) END AS t, s.tool_name "
    "FROM hs_search_scope AS s "
    "WHERE s.id > ? AND NOT EXISTS (SELECT 1 FROM hs_cjk AS c WHERE c.id = s.id) "
    "AND NOT EXISTS (SELECT 1 FROM hs_cjk_pending AS p WHERE p.id = s.id) "
    f"AND NOT {catalog.in_backfill_window('s.id')}) "
    f"WHERE t GLOB '*[{CJK_CLASS}]*' OR tool_name GLOB '*[{CJK_CLASS}]*' ORDER BY id LIMIT ?"
)
_NEWEST_SIDE_ROW = "SELECT COALESCE(max(id), 0) FROM hs_cjk"
BOUNDED_CHECK_CHARS = 1000
_SIDE_ROWS = "SELECT count(*) FROM hs_cjk"


def uncovered(conn: Connection, limit: int | None = None) -> list[int]:
    """Ids of covered messages holding CJK text with no side row and no pending mark.

    ``limit``: the bounded check a search runs after a short answer, which reads only the first
    ``limit`` covered rows after the newest side row (where a lost side table shows first), and
    of each the first ``BOUNDED_CHECK_CHARS`` characters of its text; ``None`` reads every
    covered row whole (``doctor --full``).
    """
    # On the driver cursor (same transaction): the rows' text is most of the cost, and
    # SQLAlchemy's per-row work doubled it.
    cursor = dbapi_of(conn.connection).cursor()
    try:
        after = 0 if limit is None else int(cursor.execute(_NEWEST_SIDE_ROW).fetchone()[0])
        return [row_id for row_id, text, tool_name in cursor.execute(
                    _UNCOVERED, (limit is None, BOUNDED_CHECK_CHARS, after,
                                 -1 if limit is None else limit))
                if contains_cjk(text) or contains_cjk(tool_name)]
    finally:
        cursor.close()


def side_row_count(conn: Connection) -> int:
    return int(conn.exec_driver_sql(_SIDE_ROWS).scalar() or 0)


def index_range(conn: Connection, lo: int, hi: int) -> None:
    """(Re)derive the side rows of ids in ``(lo, hi]``: the backfill and rebuild step."""
    conn.exec_driver_sql(_DELETE_RANGE, (lo, hi))
    _write(conn, conn.exec_driver_sql(_SCOPE_RANGE, (lo, hi)).all())
    conn.exec_driver_sql(_CLEAR_PENDING_RANGE, (lo, hi))


# --- PostgreSQL: the tsvector column ------------------------------------------------------------

PG_COLUMN = names.PG_CJK_COLUMN
# The literal stays below tsvector's 1 MB of lexemes even for 4-byte characters (the derived
# text of 100,000 characters has at most 100,000 distinct two-character pieces).
PG_TEXT_CHARS = 100_000
PG_CALLS_CHARS = 20_000
# Tool output is searched by its first 8,192 characters on every route (hs_search_scope).
TOOL_PREFIX_CHARS = 8192
_MAX_POSITIONS = 256  # what to_tsvector keeps per lexeme
_MAX_POSITION = 16383
_MAX_LEXEME_BYTES = 2047
# unicode61's token characters: letters, numbers, marks, private use (the end mark).
_TOKEN_RE = re.compile("(?:[^\\W_]|[\ue000-\uf8ff])+")


def _fold(token: str) -> str:
    """Casefolded, diacritics removed (unicode61's ``remove_diacritics``)."""
    token = token.casefold()
    if token.isascii():
        return token
    stripped = "".join(ch for ch in unicodedata.normalize("NFD", token)
                       if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", stripped)


def tokens(text: str) -> list[str]:
    """The lexemes of ``text`` as the bigram tsvector holds them, in order."""
    out = []
    for piece in text.split():
        for match in _TOKEN_RE.finditer(piece):
            folded = _fold(match.group())
            if folded and len(folded.encode()) <= _MAX_LEXEME_BYTES:
                out.append(folded)
    return out


def _lexeme(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def cjk_vector(text: str | None, tool_name: str | None, tool_calls: str | None) -> str:
    """The ``hs_search_cjk`` literal of a covered row: ``''`` when it holds no CJK character.

    The derived text (weight A) is what the SQLite side table's ``text`` holds; the tool-call JSON
    follows as weight B, one position apart, so a phrase never spans the two (a CJK query term
    asks for weight A, as the SQLite query names the ``text`` column).
    """
    side = side_row(text[:PG_TEXT_CHARS] if text else text, tool_name,
                    tool_calls[:PG_CALLS_CHARS] if tool_calls else tool_calls)
    return "" if side is None else bigram_vector(*side)


def bigram_vector(derived: str, calls: str | None) -> str:
    """The tsvector literal of derived bigram text (weight A) and tool-call JSON (weight B)."""
    found: dict[tuple[str, str], list[int]] = {}
    position = 0
    for weight, source in (("A", derived), ("B", calls or "")):
        for token in tokens(source):
            position += 1
            spots = found.setdefault((token, weight), [])
            if len(spots) < _MAX_POSITIONS:
                spots.append(min(position, _MAX_POSITION))
        position += 1
    return " ".join(f"{_lexeme(tok)}:{','.join(map(str, spots))}{weight}"
                    for (tok, weight), spots in found.items())


def tsquery_phrase(text: str, *, prefix: bool = False, weight: str = "") -> str | None:
    """One term of the bigram column as tsquery text: its lexemes in a row, the last one a
    prefix when asked (FTS5's ``"a b"*``); ``None`` when the text holds no lexeme."""
    found = tokens(text)
    if not found:
        return None
    parts = [f"{_lexeme(tok)}:{weight}" if weight else _lexeme(tok) for tok in found]
    if prefix:
        parts[-1] = f"{_lexeme(found[-1])}:*{weight}"
    return parts[0] if len(parts) == 1 else "(" + " <-> ".join(parts) + ")"


def row_vector(row: Mapping[str, Any]) -> str | None:
    """``hs_search_cjk`` of a row about to be inserted: tool output by its prefix, as the word
    index reads it (docs/search.md#search-scope)."""
    text = text_of(row.get("content"))
    if row.get("role") == "tool" and text:
        text = text[:TOOL_PREFIX_CHARS]
    return cjk_vector(text, row.get("tool_name"), row.get("tool_calls"))


# The model knows nothing of the search columns (autogenerate leaves them alone), so inserts
# that carry the tokens name the column on a lightweight table of their own.
def __getattr__(name: str) -> TableClause:
    if name != "PG_MESSAGES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from sqlalchemy import column, table

    from hermes_store.db.models import Message

    found = table("messages", *(column(c.name, c.type) for c in Message.__table__.columns),
                  column(PG_COLUMN))
    globals()["PG_MESSAGES"] = found
    return found


def writes_vector(conn: Connection, into: Table | None = None) -> bool:
    """True when rows inserted into ``into`` (the messages table) must carry ``hs_search_cjk``."""
    if dialect_name(conn) != PG or not has_index(conn):
        return False
    return into is None or into.name == "messages"


def with_vector(row: Mapping[str, Any]) -> dict[str, Any]:
    return {**row, PG_COLUMN: row_vector(row)}


_PG_PENDING = ("SELECT id, content, role, tool_name, tool_calls FROM messages "
               "WHERE hs_search_cjk IS NULL ORDER BY id LIMIT %s")
_PG_SET = "UPDATE messages SET hs_search_cjk = %s::tsvector WHERE id = %s"
_PG_PENDING_COUNT = "SELECT count(*) FROM messages WHERE hs_search_cjk IS NULL"


def _pg_catch_up(conn: Connection, limit: int) -> int:
    rows = conn.exec_driver_sql(_PG_PENDING, (limit,)).all()
    values = [(row_vector({"content": content, "role": role, "tool_name": tool_name,
                           "tool_calls": tool_calls}), row_id)
              for row_id, content, role, tool_name, tool_calls in rows]
    if values:
        conn.exec_driver_sql(_PG_SET, values)
    return len(values)
