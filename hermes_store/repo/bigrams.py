"""CJK bigram index maintenance (docs/search.md#cjk-bigrams; layout in revision 0016).

``sync_messages(conn, ids)`` brings the side rows of the given messages up to date inside the
caller's transaction: the writer inserts or updates messages, the ``messages`` triggers record
the ids in ``messages_cjk_pending``, and this derives the bigram text (:func:`cjk_bigram_text`),
writes ``messages_cjk`` (whose own triggers keep ``messages_fts_cjk`` in step) and clears the ids.
Rows written by other programs stay pending until :func:`catch_up` runs; search covers them
meanwhile with a LIKE bounded to the pending ids. Until the index exists it does nothing.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import accumulate

from sqlalchemy import Connection

from hermes_store.db import catalog
from hermes_store.db.dialect import has_fts5

# Private-use mark closing a CJK run in the bigram text. Private use (Co) is a token character for
# unicode61, so "端" + mark stays one token that no real text produces.
BIGRAM_END = "\ue000"

# --- CJK character classes -----------------------------------------------------------------------

_CJK_RANGES = (
    "\u3000-\u303f"  # CJK symbols and punctuation: counts as CJK, never part of a bigram run
    "\u3040-\u309f\u30a0-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # ideographs: extension A, unified, compatibility
    "\uac00-\ud7af"  # hangul syllables
    "\U00020000-\U0002a6df\U0002a700-\U0002ebef"  # ideograph extensions B-F
)
_CJK_RE = re.compile(f"[{_CJK_RANGES}]")
# Letters only: U+3000-303F is excluded by the contract, and the few kana-block code points that
# are punctuation or spacing marks (゛゜゠・) are left out so a run never holds a separator.
CJK_RUN_RE = re.compile(
    "[\u3041-\u309a\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
    "\U00020000-\U0002a6df\U0002a700-\U0002ebef]+"
)


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
    return [flat[3 * start : 3 * end - 1] for start, end in zip([0, *ends], ends)]


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
    "DELETE FROM messages_cjk WHERE id IN (SELECT value FROM json_each(?)) "
    f"AND NOT {catalog.in_backfill_window('id')}"
)
_SCOPE_ROWS = (
    "SELECT id, text, tool_name, tool_calls FROM messages_search_scope "
    "WHERE id IN (SELECT value FROM json_each(?)) "
    f"AND NOT {catalog.in_backfill_window('id')}"
)
_SCOPE_RANGE = (
    "SELECT id, text, tool_name, tool_calls FROM messages_search_scope WHERE id > ? AND id <= ?"
)
_DELETE_RANGE = "DELETE FROM messages_cjk WHERE id > ? AND id <= ?"
_CLEAR_PENDING_RANGE = "DELETE FROM messages_cjk_pending WHERE id > ? AND id <= ?"
_INSERT_SIDE = "INSERT OR REPLACE INTO messages_cjk (id, text, calls) VALUES (?, ?, ?)"
_CLEAR_PENDING = "DELETE FROM messages_cjk_pending WHERE id IN (SELECT value FROM json_each(?))"
_PENDING_IDS = "SELECT id FROM messages_cjk_pending ORDER BY id LIMIT ?"
_PENDING_COUNT = "SELECT count(*) FROM messages_cjk_pending"


def side_row(text: str | None, tool_name: str | None,
             tool_calls: str | None) -> tuple[str, str | None] | None:
    """The ``(text, calls)`` a covered row stores, or ``None`` when it has no CJK character."""
    if not (contains_cjk(text) or contains_cjk(tool_name)):
        return None
    derived = cjk_bigram_text(" ".join(t for t in (text, tool_name) if t))
    return derived, tool_calls


def has_index(conn: Connection) -> bool:
    # Cached only once seen: the table never goes away again, while a migration may create it.
    if conn.info.get("hermes_cjk_index"):
        return True
    if not has_fts5(conn):
        return False
    found = catalog.has_table(conn, catalog.CJK_SIDE_TABLE)
    if found:
        conn.info["hermes_cjk_index"] = True
    return found


def _write(conn: Connection, rows: Iterable[Sequence[object]]) -> None:
    values = []
    for row_id, text, tool_name, tool_calls in rows:
        side = side_row(text, tool_name, tool_calls)  # type: ignore[arg-type]
        if side is not None:
            values.append((row_id, *side))
    if values:
        conn.exec_driver_sql(_INSERT_SIDE, values)


def _sync(conn: Connection, ids: list[int]) -> None:
    batch = json.dumps(ids)
    conn.exec_driver_sql(_DELETE_SIDE, (batch,))
    _write(conn, conn.exec_driver_sql(_SCOPE_ROWS, (batch,)).all())
    conn.exec_driver_sql(_CLEAR_PENDING, (batch,))


# One message (every append) takes the same steps with ``id = ?`` on the driver cursor:
# SQLAlchemy's per-statement cost was most of an append's fixed cost.
_DELETE_SIDE_ONE = f"DELETE FROM messages_cjk WHERE id = ? AND NOT {catalog.in_backfill_window('id')}"
_SCOPE_ROW = ("SELECT text, tool_name, tool_calls FROM messages_search_scope WHERE id = ? "
              f"AND NOT {catalog.in_backfill_window('id')}")
_CLEAR_PENDING_ONE = "DELETE FROM messages_cjk_pending WHERE id = ?"


def _sync_one(conn: Connection, row_id: int) -> list[int]:
    """:func:`_sync` of one id; returns the pending ids a writer drains on its way."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(_DELETE_SIDE_ONE, (row_id,))
        found = cursor.execute(_SCOPE_ROW, (row_id,)).fetchone()
        side = side_row(*found) if found is not None else None
        if side is not None:
            cursor.execute(_INSERT_SIDE, (row_id, *side))
        cursor.execute(_CLEAR_PENDING_ONE, (row_id,))
        return [r[0] for r in cursor.execute(_PENDING_IDS, (OPPORTUNISTIC_DRAIN,))]
    finally:
        cursor.close()


def sync_messages(conn: Connection, ids: Iterable[int]) -> None:
    """Derive and store the bigram rows of these messages (no-op until the index exists)."""
    wanted = sorted({int(i) for i in ids})
    if not wanted or not has_index(conn):
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
    pending = [r[0] for r in conn.exec_driver_sql(_PENDING_IDS, (limit,))]
    if pending:
        _sync(conn, pending)
    return len(pending)


def pending_count(conn: Connection) -> int:
    return int(conn.exec_driver_sql(_PENDING_COUNT).scalar() or 0) if has_index(conn) else 0


def index_range(conn: Connection, lo: int, hi: int) -> None:
    """(Re)derive the side rows of ids in ``(lo, hi]``: the backfill and rebuild step."""
    conn.exec_driver_sql(_DELETE_RANGE, (lo, hi))
    _write(conn, conn.exec_driver_sql(_SCOPE_RANGE, (lo, hi)).all())
    conn.exec_driver_sql(_CLEAR_PENDING_RANGE, (lo, hi))
