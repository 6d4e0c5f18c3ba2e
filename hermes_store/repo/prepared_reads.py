"""The session reads of ``hermes-store search`` and ``list`` on a store file, run on the DB-API
connection without SQLAlchemy: each statement is the one the repo builds
(``listing.session_with_activity``, ``lineage.root_of``, ``lineage.tip_of``,
``listing.list_matching`` with an empty filter, ``prompts.resolve``), compiled once by
:mod:`repo.prepared_build` into :mod:`repo.prepared_sql`. Importing SQLAlchemy's Core and ORM
cost a reading command several times what its statements do; these give the same rows
(tests/test_cli_startup.py compares them).
"""

from __future__ import annotations

import time
from typing import Any

from hermes_store.db import catalog
from hermes_store.repo import session_rows
from hermes_store.repo.prepared_sql import SQL


def _run(conn: Any, name: str, **params: Any) -> Any:
    text, constants = SQL[name]
    if "keys" in params:  # an expanding IN: one named parameter per value
        keys = params.pop("keys")
        text = text.replace("__[POSTCOMPILE_keys]",
                            ", ".join(f":keys_{i}" for i in range(len(keys))))
        params.update({f"keys_{i}": key for i, key in enumerate(keys)})
    return conn.connection.driver_connection.execute(text, {**constants, **params})


def _mappings(cursor: Any) -> list[dict[str, Any]]:
    keys = [d[0] for d in cursor.description]
    return [dict(zip(keys, row, strict=True)) for row in cursor.fetchall()]


def lineage_tip(conn: Any, session_id: str) -> str:
    """``listing.lineage_tip``: the compression tip of the session (itself when none)."""
    root = _run(conn, "root_of", sid=session_id).fetchone()
    if root is None or root[0] is None:
        return session_id
    cursor = _run(conn, "compression_tip", sid=session_id, root=root[0])
    tip = cursor.fetchone()
    if tip is None:
        return session_id
    tip_id: str = tip[[d[0] for d in cursor.description].index("id")]
    return tip_id


def session_with_activity(conn: Any, session_id: str) -> dict[str, Any]:
    """``listing.session_with_activity``: every column plus ``last_active`` and
    ``lineage_tip_id`` (``{"id": …}`` when gone)."""
    cursor = _run(conn, "session_row", sid=session_id, now=time.time())
    row = cursor.fetchone()
    item = (dict(zip([d[0] for d in cursor.description], row, strict=True)) if row is not None
            else {"id": session_id})
    item["lineage_tip_id"] = lineage_tip(conn, session_id)
    return item


def listable(flt: Any, *, archived: bool, pinned: bool, only_open: bool) -> bool:
    """Whether ``list`` with this filter and these flags is one of the compiled statements
    (the others are built by the repo, through SQLAlchemy)."""
    return flt.is_empty and not (archived or pinned or only_open)


def with_prompts(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``listing.with_prompts``: prompts stored by hash filled in."""

    def resolve(pending: list[dict[str, Any]]) -> None:
        if not catalog.has_table(conn, session_rows.PROMPTS_TABLE):
            return
        keys = sorted({r[session_rows.HASH_COLUMN] for r in pending})
        found: dict[str, str] = {}
        for start in range(0, len(keys), 500):
            found.update(_run(conn, "prompts", keys=keys[start:start + 500]).fetchall())
        for row in pending:
            row["system_prompt"] = found.get(row[session_rows.HASH_COLUMN])

    return session_rows.with_prompts(rows, resolve)


def list_page(conn: Any, *, limit: int, show_all: bool, now: float,
              ) -> tuple[list[dict[str, Any]], bool]:
    """``listing.list_matching`` with an empty filter (``show_all``: ``--all``): the rows
    and whether more sessions match."""
    if show_all:
        name = "listing_all"
    elif any(c.name == session_rows.HIDDEN for c in catalog.columns(conn, "sessions")):
        name = "listing_hidden"
    else:
        name = "listing"
    found = _mappings(_run(conn, name, limit=limit + 1, offset=0, now=now))
    rows = with_prompts(conn, [session_rows.finish_row(r) for r in found])
    if not show_all:
        rows = [session_rows.project(row, lambda sid: lineage_tip(conn, sid),
                                     lambda sid: _tip_row(conn, sid, now)) for row in rows]
    return rows[:limit], len(rows) > limit


def _tip_row(conn: Any, session_id: str, now: float) -> dict[str, Any] | None:
    found = _mappings(_run(conn, "tip_row", sid=session_id, now=now))
    return with_prompts(conn, [session_rows.finish_row(found[0])])[0] if found else None
