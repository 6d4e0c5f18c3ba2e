"""Search as ``hermes-store search`` asks it: message hits kept when their session passes the
session-level filters (a lineage, recent activity, not archived), one page of them, how many
match in all, and each shown session's row.

``search_messages`` filters by source and role inside its statements; the session-level filters
are applied here, page by page. Counting reads on to ``COUNT_CAP`` matching hits (and a bounded
number of pages): beyond that the total is a lower bound (``exact`` is False).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermes_store.repo import prepared_reads
from hermes_store.search.language import apply_syntax
from hermes_store.search.language import exclusions_only as exclusions_only  # the CLI's name
from hermes_store.search.language import with_exclusions as with_exclusions  # the CLI's name
from hermes_store.search.shape import SearchHit
from hermes_store.search.statements import search_messages

if TYPE_CHECKING:  # a file's search runs on db.raw: SQLAlchemy and the models load only where
    # a statement is built (title hints, --session, a server store)
    from sqlalchemy import Connection

MAX_PAGES = 20
PAGE = 100
COUNT_CAP = 1000


@dataclass
class SessionHits:
    """One page of hits in search order, the row (plus ``last_active``, ``lineage_tip_id``) of
    every session they belong to, and how many hits match in all (a lower bound unless
    ``exact``)."""

    hits: list[SearchHit] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    offset: int = 0
    total: int = 0
    exact: bool = True

    @property
    def more(self) -> int:
        """Matching hits after this page."""
        return max(0, self.total - self.offset - len(self.hits))

    def grouped(self) -> dict[str, list[SearchHit]]:
        """Hits by session id, sessions in the order of their best hit."""
        groups: dict[str, list[SearchHit]] = {}
        for hit in self.hits:
            groups.setdefault(hit["session_id"], []).append(hit)
        return groups


def title_matches(conn: Connection, text: str, *, limit: int = 20) -> int:
    """How many sessions (up to ``limit``) have ``text`` in their title: search reads
    messages, and a word found only in titles deserves a pointer to ``list --title``."""
    from hermes_store.repo import listing
    from hermes_store.repo.filter_values import SessionFilter

    page = listing.list_matching(conn, SessionFilter(title=text), limit=limit,
                                 include_archived=True)
    return len(page.rows)


def lineage_scope(conn: Connection, session_id: str) -> set[str]:
    """The ids of the compression lineage through ``session_id`` (``--session``)."""
    from hermes_store.repo.retention import lineage_of

    return set(lineage_of(conn, session_id)) or {session_id}


def search_sessions_hits(conn: Connection, text: str, *, sources: list[str] | None = None,
                         roles: list[str] | None = None, limit: int = 20, offset: int = 0,
                         scope: set[str] | None = None, active_after: float | None = None,
                         no_archived: bool = False, include_tools: bool = False,
                         syntax: str = "agent", model: str | None = None) -> SessionHits:
    """The ``limit`` hits after the first ``offset`` whose session is in ``scope`` (when
    given), active at or after ``active_after`` and, with ``no_archived``, not archived.

    ``include_tools``: the index holds only the first 8 KiB of a tool output, and role
    ``tool`` makes ``search_messages`` read whole bodies; when the first pass leaves room on
    this page, a second pass over tool rows fills it (same filters, same bounds)."""
    text = apply_syntax(text, syntax)
    wanted = offset + limit
    meta: dict[str, dict[str, Any]] = {}
    test = _SessionTest(conn, meta, scope, active_after, no_archived, model)
    kept, exact = _matching(conn, text, sources, roles, test, wanted)
    if include_tools and (not roles or "tool" in roles) and exact and len(kept) < wanted:
        seen = {h["id"] for h in kept}
        tools, tools_exact = _matching(conn, text, sources, ["tool"], test, wanted)
        kept += [h for h in tools if h["id"] not in seen]
        exact = tools_exact
    page = kept[offset:wanted]
    for hit in page:
        test.row(hit["session_id"])
    return SessionHits(page, {h["session_id"]: meta[h["session_id"]] for h in page}, offset,
                       len(kept), exact)


@dataclass
class _SessionTest:
    """Whether a hit's session passes the session-level filters; rows read once, on demand."""

    conn: Connection
    meta: dict[str, dict[str, Any]]
    scope: set[str] | None
    active_after: float | None
    no_archived: bool
    model: str | None = None  # substring of the session's model, case-insensitive

    def row(self, sid: str) -> dict[str, Any]:
        if sid not in self.meta:
            self.meta[sid] = _session_with_activity(self.conn, sid)
        return self.meta[sid]

    def __call__(self, sid: str) -> bool:
        if self.scope is not None and sid not in self.scope:
            return False
        if not self.no_archived and self.active_after is None and not self.model:
            return True
        row = self.row(sid)
        if self.no_archived and row.get("archived"):
            return False
        if self.model and self.model.casefold() not in str(row.get("model") or "").casefold():
            return False
        return self.active_after is None or (row.get("last_active") or 0) >= self.active_after


def _session_with_activity(conn: Connection, sid: str) -> dict[str, Any]:
    """A hit's session row: on SQLite through the prepared statements (the same SQL, without
    loading SQLAlchemy), on a server through the repo."""
    if conn.dialect.name == "sqlite":
        return prepared_reads.session_with_activity(conn, sid)
    from hermes_store.repo import listing

    return listing.session_with_activity(conn, sid)


def _matching(conn: Connection, text: str, sources: list[str] | None,
              roles: list[str] | None, test: _SessionTest,
              wanted: int) -> tuple[list[SearchHit], bool]:
    """Hits passing ``test`` in search order, up to ``COUNT_CAP`` (at least ``wanted`` + 1);
    True when that is all of them."""
    cap = max(COUNT_CAP, wanted + 1)
    kept: list[SearchHit] = []
    for n in range(MAX_PAGES + -(-cap // PAGE)):
        batch = search_messages(conn, text, source_filter=sources, role_filter=roles,
                                limit=PAGE, offset=n * PAGE)
        kept += [hit for hit in batch if test(hit["session_id"])]
        if len(batch) < PAGE:
            return kept, True
        if len(kept) >= cap:
            return kept, False
    return kept, False
