"""Search as ``hermes-store search`` asks it: message hits kept when their session passes the
session-level filters (a lineage, recent activity, not archived), with each session's row.

``search_messages`` filters by source and role inside its statements; the session-level filters
are applied here, page by page, at most ``MAX_PAGES`` pages deep, so a filter that rejects most
hits costs a bounded number of reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from hermes_store.repo import listing
from hermes_store.repo.retention import lineage_of
from hermes_store.search.statements import search_messages

MAX_PAGES = 20
_QUERY_TOKEN = re.compile(r'-?"[^"]*"\*?|\S+')
_OR = "OR"
# Filters that reject hits after the search read wider pages, so fewer round trips are needed.
FILTERED_PAGE = 100


@dataclass
class SessionHits:
    """Hits in search order, and the row (plus ``last_active``, ``lineage_tip_id``) of every
    session they belong to."""

    hits: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def grouped(self) -> dict[str, list[dict[str, Any]]]:
        """Hits by session id, sessions in the order of their best hit."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for hit in self.hits:
            groups.setdefault(hit["session_id"], []).append(hit)
        return groups


def with_exclusions(text: str) -> str:
    """The command line's ``-word`` (and ``-"a phrase"``) as the query language's ``NOT``.

    The library's sanitizer trims a leading ``-``, as the session API asks; on the command line
    a ``-`` before a letter or a quote excludes the term. Juxtaposition binds tighter than NOT,
    so each exclusion moves to the end of its ``OR`` branch (``a -b c`` is ``a c NOT b``); a
    branch made of exclusions alone cannot be expressed and is dropped. ``-1`` and a lone
    ``-`` stay words."""
    branches: list[tuple[list[str], list[str]]] = [([], [])]
    for token in _QUERY_TOKEN.findall(text):
        if token == _OR:
            branches.append(([], []))
        elif len(token) > 1 and token[0] == "-" and (token[1].isalpha() or token[1] == '"'):
            branches[-1][1].append(token[1:])
        else:
            branches[-1][0].append(token)
    parts = [" ".join(words + [f"NOT {term}" for term in excluded])
             for words, excluded in branches if words]
    return f" {_OR} ".join(parts)


def lineage_scope(conn: Connection, session_id: str) -> set[str]:
    """The ids of the compression lineage through ``session_id`` (``--session``)."""
    return set(lineage_of(conn, session_id)) or {session_id}


def search_sessions_hits(conn: Connection, text: str, *, sources: list[str] | None = None,
                         roles: list[str] | None = None, limit: int = 20,
                         scope: set[str] | None = None, active_after: float | None = None,
                         no_archived: bool = False,
                         include_tools: bool = False) -> SessionHits:
    """Up to ``limit`` hits whose session is in ``scope`` (when given), active at or after
    ``active_after`` and, with ``no_archived``, not archived.

    ``include_tools``: the index holds only the first 8 KiB of a tool output, and role
    ``tool`` makes ``search_messages`` read whole bodies; when the first pass leaves room,
    a second pass over tool rows fills it (same filters, same bound)."""
    out = SessionHits()
    _collect(conn, out, text, sources, roles, limit, scope, active_after, no_archived)
    if include_tools and (not roles or "tool" in roles) and len(out.hits) < limit:
        seen = {h["id"] for h in out.hits}
        extra = SessionHits(sessions=out.sessions)
        _collect(conn, extra, text, sources, ["tool"], limit, scope, active_after, no_archived)
        out.hits += [h for h in extra.hits if h["id"] not in seen][:limit - len(out.hits)]
    return out


def _collect(conn: Connection, out: SessionHits, text: str, sources: list[str] | None,
             roles: list[str] | None, limit: int, scope: set[str] | None,
             active_after: float | None, no_archived: bool) -> None:
    filtered = scope is not None or active_after is not None or no_archived
    page = max(limit, FILTERED_PAGE) if filtered else limit
    for n in range(MAX_PAGES):
        batch = search_messages(conn, text, source_filter=sources, role_filter=roles,
                                limit=page, offset=n * page)
        for hit in batch:
            sid = hit["session_id"]
            if sid not in out.sessions:
                out.sessions[sid] = listing.session_with_activity(conn, sid)
            row = out.sessions[sid]
            if scope is not None and sid not in scope:
                continue
            if no_archived and row.get("archived"):
                continue
            if active_after is not None and (row.get("last_active") or 0) < active_after:
                continue
            out.hits.append(hit)
            if len(out.hits) >= limit:
                return
        if len(batch) < page:
            return
