"""System prompts stored once by hash, the way the agent keeps them from its schema 25 on.

The agent moves each session's prompt into ``system_prompts(hash, prompt)`` (the SHA-256 hex of
the text), leaving ``sessions.system_prompt`` NULL and ``sessions.system_prompt_hash`` pointing
at the row; a prompt is then ``COALESCE(sessions.system_prompt, system_prompts.prompt)``. Our
models declare neither, so a store has this layout only when that agent has opened it (or a
``copy`` brought it along). Readers resolve the hash wherever a session row is read; writers
store a new prompt the agent's way when the store has the layout, so the agent reads back what
we write and the file does not hold a 17 KB prompt once per session again.

Functions take the caller's ``Connection`` and never commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, and_, column, select, table, update

from hermes_store.db import catalog
from hermes_store.db.dialect import insert
from hermes_store.repo.session_rows import HASH_COLUMN, PROMPTS_TABLE, pending_prompts

_prompts = table(PROMPTS_TABLE, column("hash"), column("prompt"))
_sessions = table("sessions", column("id"), column("system_prompt"), column(HASH_COLUMN))


def digest(prompt: str) -> str:
    """The key the agent files a prompt under."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()


def hashed(conn: Connection) -> bool:
    """Whether this store keeps prompts by hash (the table, and the column pointing at it)."""
    return (catalog.has_table(conn, PROMPTS_TABLE)
            and any(c.name == HASH_COLUMN for c in catalog.columns(conn, "sessions")))


def resolve(conn: Connection, rows: Iterable[dict[str, Any]]) -> None:
    """Fill ``system_prompt`` of session rows whose text is stored by hash (in place).

    Rows of a store without the layout carry no hash key, so this costs nothing there."""
    pending = pending_prompts(list(rows))
    if not pending or not catalog.has_table(conn, PROMPTS_TABLE):
        return
    keys = sorted({r[HASH_COLUMN] for r in pending})
    found: dict[str, str] = {}
    for start in range(0, len(keys), 500):
        found.update(conn.execute(select(_prompts.c.hash, _prompts.c.prompt)
                                  .where(_prompts.c.hash.in_(keys[start:start + 500]))).all())
    for row in pending:
        row["system_prompt"] = found.get(row[HASH_COLUMN])


def resolve_one(conn: Connection, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    item = dict(row)
    resolve(conn, [item])
    return item


def _keep(conn: Connection, prompt: str) -> str:
    key = digest(prompt)
    conn.execute(insert(conn, _prompts).values(hash=key, prompt=prompt)
                 .on_conflict_do_nothing(index_elements=["hash"]))
    return key


def fill(conn: Connection, session_id: str, prompt: str) -> None:
    """Give a session that has no prompt yet this one, by hash (``create_session`` on an
    existing row never overwrites)."""
    key = _keep(conn, prompt)
    conn.execute(update(_sessions).where(
        and_(_sessions.c.id == session_id, _sessions.c.system_prompt.is_(None),
             _sessions.c[HASH_COLUMN].is_(None))).values({HASH_COLUMN: key}))


def replace(conn: Connection, session_id: str, prompt: str | None) -> bool:
    """Set (or with None clear) a session's prompt, by hash; False for an unknown session."""
    key = _keep(conn, prompt) if prompt is not None else None
    result = conn.execute(update(_sessions).where(_sessions.c.id == session_id)
                          .values({"system_prompt": None, HASH_COLUMN: key}))
    return result.rowcount > 0


def move(conn: Connection, session_ids: Iterable[str]) -> None:
    """Store the plain-text prompts of these sessions by hash when the store keeps prompts so
    (the agent's own schema-25 move, for rows a bulk writer has just written whole)."""
    ids = list(session_ids)
    if not ids or not hashed(conn):
        return
    for start in range(0, len(ids), 500):
        rows = conn.execute(select(_sessions.c.id, _sessions.c.system_prompt).where(
            _sessions.c.id.in_(ids[start:start + 500]),
            _sessions.c.system_prompt.is_not(None))).all()
        for session_id, prompt in rows:
            replace(conn, session_id, prompt)
