"""The raw floors the benchmarks compare the library with: a bare driver running the statements
the library's append runs, one transaction a message, with no validation, no SQLAlchemy and no
retry policy around them.

* SQLite (``sqlite3``): ``BEGIN IMMEDIATE``, the insert, the counter update, the CJK side row
  (read through the search view, derived in Python with the library's own function: the layout
  needs it) and the pending-list upkeep, ``COMMIT``; a PASSIVE checkpoint every 50 writes, as the
  library does. Lock waits are SQLite's busy handler (``timeout``).
* PostgreSQL (``psycopg``): ``BEGIN`` (READ COMMITTED, as the library's appends), the insert
  with every column the library names and the ``hs_search_cjk`` tokens (derived with the library's
  function, as the layout needs), the counter update, ``COMMIT``.

``gin_settings`` gives the GIN indexes of a PostgreSQL store another pending-list setting, for
the benchmarks that measure what a flush costs an append.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from hermes_store.db.engine import CHECKPOINT_EVERY_N_WRITES as CHECKPOINT_EVERY
from hermes_store.repo import bigrams

# The library names every column it may fill; the floor binds the same list (unset ones NULL).
SQLITE_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp, "
    "tool_call_id, token_count, finish_reason, reasoning, reasoning_content, "
    "reasoning_details, codex_reasoning_items, codex_message_items) "
    "VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
SQLITE_BUMP = ("UPDATE sessions SET message_count = coalesce(message_count, 0) + 1, "
               "tool_call_count = coalesce(tool_call_count, 0) + ? WHERE id = ?")
# The statements of repo/bigrams.py for one id, backfill-window guard included.
OUTSIDE = "NOT EXISTS (SELECT 1 FROM hs_backfill_window WHERE id > lo AND id <= hi)"
UNSIDE = f"DELETE FROM hs_cjk WHERE id = ? AND {OUTSIDE}"
SCOPE_ROW = ("SELECT text, tool_name, tool_calls FROM hs_search_scope "
             f"WHERE id = ? AND {OUTSIDE}")
SIDE = "INSERT OR REPLACE INTO hs_cjk (id, text, calls) VALUES (?, ?, ?)"
CLEAR = "DELETE FROM hs_cjk_pending WHERE id = ?"
DRAIN = "SELECT id FROM hs_cjk_pending ORDER BY id LIMIT 32"

# Every column of a prepared message row (repo.messages.prepare_message), then the CJK tokens.
PG_COLUMNS = ("session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
              "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
              "reasoning_details", "codex_reasoning_items", "codex_message_items",
              "platform_message_id", "observed", "effect_disposition", "active", "compacted",
              "hs_search_cjk")
PG_INSERT = (f"INSERT INTO messages ({', '.join(PG_COLUMNS)}) "
             f"VALUES ({', '.join(['%s'] * len(PG_COLUMNS))}) RETURNING id")
PG_BUMP = ("UPDATE sessions SET message_count = coalesce(message_count, 0) + %s, "
           "tool_call_count = coalesce(tool_call_count, 0) + %s WHERE id = %s")


def tool_calls_of(role: str, tool_calls: str | None) -> int:
    return 0 if role == "tool" or tool_calls is None else 1


def sqlite_connect(path: str, synchronous: int, timeout: float = 60.0) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None, timeout=timeout)
    con.execute(f"PRAGMA synchronous={int(synchronous)}")
    con.execute("PRAGMA foreign_keys=ON")
    return con


def sqlite_append(con: sqlite3.Connection, n: int, session_id: str, role: str, content: str,
                  tool_name: str | None, tool_calls: str | None, timestamp: float) -> int:
    """The ``n``-th append of this connection (1-based: the checkpoint cadence)."""
    con.execute("BEGIN IMMEDIATE")
    new_id = con.execute(SQLITE_INSERT, (session_id, role, content, tool_name, tool_calls,
                                         timestamp)).lastrowid
    con.execute(SQLITE_BUMP, (tool_calls_of(role, tool_calls), session_id))
    con.execute(UNSIDE, (new_id,))
    found = con.execute(SCOPE_ROW, (new_id,)).fetchone()
    side = bigrams.side_row(*found) if found else None
    if side:
        con.execute(SIDE, (new_id, *side))
        if bigrams.glued(found[0]) or bigrams.glued(found[1]):
            con.execute(bigrams.MARK_GLUED)
    con.execute(CLEAR, (new_id,))
    con.execute(DRAIN).fetchall()
    con.execute("COMMIT")
    if n % CHECKPOINT_EVERY == 0:
        con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    return int(new_id or 0)


def pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))


def pg_append(con: Any, session_id: str, role: str, content: str, tool_name: str | None,
              tool_calls: str | None, timestamp: float | None = None) -> int:
    """One message in one transaction, as the library writes it."""
    vector = None if role == "tool" else bigrams.cjk_vector(content, tool_name, tool_calls)
    row = (session_id, role, content, None, tool_calls, tool_name,
           time.time() if timestamp is None else timestamp, None, None, None, None, None, None,
           None, None, 0, None, 1, 0, vector)
    with con.transaction():
        new_id = con.execute(PG_INSERT, row).fetchone()[0]
        con.execute(PG_BUMP, (1, tool_calls_of(role, tool_calls), session_id))
    return int(new_id)


GIN_INDEXES = ("hs_idx_messages_words", "hs_idx_messages_trgm", "hs_idx_messages_cjk")


def gin_settings(setting: str) -> list[str]:
    """Statements giving the GIN indexes ``setting``: ``on`` (PostgreSQL's default: fastupdate
    with a 4 MB pending list), ``off``, or a pending-list limit in kB (fastupdate on)."""
    if setting == "on":
        return [s for i in GIN_INDEXES for s in (f"ALTER INDEX {i} SET (fastupdate = on)",
                                                 f"ALTER INDEX {i} RESET (gin_pending_list_limit)")]
    if setting == "off":
        return [f"ALTER INDEX {i} SET (fastupdate = off)" for i in GIN_INDEXES]
    return [f"ALTER INDEX {i} SET (fastupdate = on, gin_pending_list_limit = {int(setting)})"
            for i in GIN_INDEXES]
