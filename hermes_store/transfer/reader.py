"""Streaming reads for exports: every live column, page by page, one bad cell never aborting.

Exports read through a caller-owned :class:`~sqlalchemy.Connection` with Core selects over the
*reflected* ``sessions``/``messages`` tables, so the columns an adopted upstream store has and the
models do not (``handoff_state``, ``chat_id``…) are carried too. Messages come in keyset pages of
:data:`MESSAGE_PAGE` rows, so memory stays bounded for any session (docs/lessons.md#transfer: a
300k-message export must not load gigabytes). A cell that is not valid UTF-8 (bad bytes in TEXT) is
returned as its raw ``bytes`` instead of failing the row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    Table,
    and_,
    func,
    select,
)

from hermes_store.db import catalog
from hermes_store.db.engine import reading
from hermes_store.db.sqlite_driver import UndecodableText
from hermes_store.repo import prompts
from hermes_store.repo.retention import lineage_of

__all__ = ["MESSAGE_PAGE", "StoreReader"]

MESSAGE_PAGE = 50


@dataclass
class StoreReader:
    """The reflected tables of one store, read through the caller's connection.

    Built from an :class:`~sqlalchemy.Engine` instead, it reads each :meth:`scope` (one session
    of an export) in its own short read transaction, so a long export never pins the WAL.
    """

    conn: Connection | None
    sessions: Table
    messages: Table
    engine: Engine | None = None

    @classmethod
    def reflect(cls, source: Connection | Engine) -> StoreReader:
        if isinstance(source, Engine):
            with reading(source) as conn:
                reader = cls.reflect(conn)
            reader.conn, reader.engine = None, source
            return reader
        return cls(source, catalog.reflect(source, "sessions"),
                   catalog.reflect(source, "messages"))

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A read transaction for a unit of work (engine mode); a no-op on a caller's connection."""
        if self.engine is None or self.conn is not None:
            yield
            return
        with reading(self.engine) as conn:
            self.conn = conn
            try:
                yield
            finally:
                self.conn = None

    @property
    def _c(self) -> Connection:
        if self.conn is None:
            raise RuntimeError("StoreReader used outside scope() in engine mode")
        return self.conn

    # ---------------------------------------------------------------- sessions
    def session_ids(self) -> list[str]:
        """Every session id, oldest start first (parents before their continuations)."""
        s = self.sessions.c
        return list(self._c.scalars(select(s.id).order_by(s.started_at, s.id)))

    def existing_ids(self, ids: list[str]) -> list[str]:
        s = self.sessions.c
        found: set[str] = set()
        for i in range(0, len(ids), 500):
            found.update(self._c.scalars(select(s.id).where(s.id.in_(ids[i:i + 500]))))
        return [i for i in ids if i in found]

    def session(self, session_id: str) -> dict[str, Any] | None:
        """All live columns of one session; ``system_prompt`` resolved through its hash table."""
        t = self.sessions
        rows = self._rows(t, t.c.id == session_id, t.c.id, limit=None)
        prompts.resolve(self._c, rows)
        return rows[0] if rows else None

    def message_stats(self, session_id: str) -> tuple[int, float | None]:
        """(rows in the store, newest message time) for one session."""
        m = self.messages.c
        count, newest = self._c.execute(
            select(func.count(), func.max(m.timestamp)).where(m.session_id == session_id)
        ).one()
        return int(count), newest

    def lineage_ids(self, session_id: str) -> list[str]:
        """Compression lineage root→tip through *session_id*, by the one definition listing and
        retention use (:func:`hermes_store.repo.retention.lineage_of`); just the id when it has none."""
        # A cycle in damaged data repeats ids up to the walk's depth bound: each is kept once.
        return list(dict.fromkeys(lineage_of(self._c, session_id))) or [session_id]

    # ---------------------------------------------------------------- messages
    def iter_messages(self, session_id: str, page: int = MESSAGE_PAGE) -> Iterator[dict[str, Any]]:
        """Every row of the session (inactive and compacted included), in id order, page by page."""
        m = self.messages
        last: Any = None
        while True:
            cond = m.c.session_id == session_id
            if last is not None:
                cond = and_(cond, m.c.id > last)
            rows = self._rows(m, cond, m.c.id, limit=page)
            if not rows:
                return
            yield from rows
            last = rows[-1]["id"]
            if len(rows) < page:
                return

    # ---------------------------------------------------------------- tolerant fetch
    def _rows(self, table: Table, cond: Any, key: Any, limit: int | None) -> list[dict[str, Any]]:
        query: Select[Any] = select(table).where(cond).order_by(key)
        if limit is not None:
            query = query.limit(limit)
        # A cell that is not valid UTF-8 arrives as UndecodableText: export its raw bytes.
        return [{k: v.raw if isinstance(v, UndecodableText) else v for k, v in r.items()}
                for r in self._c.execute(query).mappings()]
