"""Read-side queries: recent sessions with preview, token usage, the rich listing, counts, and
every select the command line needs (it holds no SQL of its own).

Each builder returns a ``Select``; each runner takes a caller-owned ``Connection`` or ORM
``Session``. "Last activity" is always :func:`lineage.last_activity`, the one expression
listing, prune, archive and export share.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    and_,
    case,
    func,
    literal_column,
    or_,
    select,
)

from hermes_store.content import MULTIMODAL_PREFIX
from hermes_store.db import catalog, distribution
from hermes_store.db.dialect import starts_with
from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.errors import AmbiguousSessionError, SessionNotFoundError
from hermes_store.repo import lineage, prompts, session_rows
from hermes_store.repo.filters import SessionFilter, matching
from hermes_store.repo.session_rows import HIDDEN, PREVIEW_CHARS, TIP_COLUMNS, make_preview
from hermes_store.repo.sessions import (
    Executor,
    connection_of,
    count_with_prefix,
    exists,
    full_row,
    ids_with_prefix,
)

sessions = SESSIONS
messages = MESSAGES

# Enough raw text for a 60-character preview after newlines and surrounding blanks go.
_PREVIEW_FETCH = 400
BRANCHED = "branched"
# A session argument is a full id or a unique prefix of at least this many characters.
MIN_PREFIX = 4
MAX_CANDIDATES = 10
# Re-exported from session_rows, where the listing's row finishing lives.
__all__ = ["HIDDEN", "PREVIEW_CHARS", "TIP_COLUMNS", "make_preview"]


# --------------------------------------------------------------------------- preview


def preview_source(session_id: Any, root: Any) -> Any:
    """Raw text of the first user message by ``(timestamp, id)``; multimodal content in full.
    ``root`` is the session's root column (the correlation stays on one shard on Citus)."""
    first = (select(messages.c.content)
             .where(messages.c.session_id == session_id, messages.c.role == "user",
                    messages.c.content.is_not(None),
                    distribution.same_root(messages.c.session_id, root))
             .order_by(messages.c.timestamp, messages.c.id).limit(1).scalar_subquery())
    # The sentinel starts with NUL, where SQLite's text functions stop (starts_with knows).
    return case((starts_with(first, MULTIMODAL_PREFIX), first),
                else_=func.substr(first, 1, _PREVIEW_FETCH))


# --------------------------------------------------------------------------- seed queries


def recent_sessions_query(limit: int = 20, *, now: float | None = None) -> Select[*tuple[Any, ...]]:
    """The seed's "recent sessions with preview": ``s.*``, preview source, last activity."""
    return (select(literal_column("*"),
                   preview_source(sessions.c.id, sessions.c.root_session_id).label("preview"),
                   lineage.last_activity(sessions, now).label("last_active"))
            .select_from(sessions)
            .order_by(sessions.c.started_at.desc(), sessions.c.id.desc()).limit(limit))


def recent_sessions(conn: Executor, limit: int = 20) -> list[dict[str, Any]]:
    return with_prompts(conn, [_finish_row(row)
                               for row in conn.execute(recent_sessions_query(limit)).mappings()])


def token_usage_by_model_query() -> Select[*tuple[Any, ...]]:
    """The seed's "total tokens by model" statistics."""
    total_cost = func.sum(sessions.c.estimated_cost_usd).label("total_cost")
    return (select(sessions.c.model, func.count().label("session_count"),
                   func.sum(sessions.c.input_tokens).label("total_input"),
                   func.sum(sessions.c.output_tokens).label("total_output"), total_cost)
            .where(sessions.c.model.is_not(None))
            .group_by(sessions.c.model).order_by(total_cost.desc()))


def top_token_sessions_query(limit: int = 10) -> Select[*tuple[Any, ...]]:
    """The seed's "sessions with highest token usage"."""
    total = (func.coalesce(sessions.c.input_tokens, 0)
             + func.coalesce(sessions.c.output_tokens, 0)).label("total_tokens")
    return (select(sessions.c.id, sessions.c.title, sessions.c.model, total,
                   sessions.c.estimated_cost_usd)
            .order_by(total.desc(), sessions.c.id).limit(limit))


def token_usage_by_model(conn: Executor) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(token_usage_by_model_query()).mappings()]


def top_token_sessions(conn: Executor, limit: int = 10) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(top_token_sessions_query(limit)).mappings()]


# --------------------------------------------------------------------------- listing


_finish_row = session_rows.finish_row


def with_prompts(conn: Executor, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with prompts stored by hash filled in (:mod:`hermes_store.repo.prompts`)."""
    return session_rows.with_prompts(rows, lambda pending: prompts.resolve(connection_of(conn),
                                                                            pending))


def not_hidden(conn: Executor) -> Any:
    """``hidden = 0`` (NULL counts as 0) when the store has the agent's ``hidden`` column
    (schema 31: sessions a user hid from their lists); None when it has no such column."""
    if not any(c.name == HIDDEN for c in catalog.columns(connection_of(conn), "sessions")):
        return None
    return hidden_clause()


def hidden_clause() -> Any:
    """``hidden = 0``, NULL counting as 0 (see :func:`not_hidden`)."""
    return func.coalesce(literal_column(f"sessions.{HIDDEN}"), 0) == 0


def _source_filters(source: str | None, exclude_sources: Sequence[str] | None) -> list[Any]:
    clauses = []
    if source is not None:
        clauses.append(sessions.c.source == source)
    if exclude_sources:
        clauses.append(sessions.c.source.not_in(list(exclude_sources)))
    return clauses


def visible_clause() -> Any:
    """Roots, children whose parent row is gone, and branch children (parent ended
    ``branched``, child started at or after that end). Subagent children and compression
    continuations are not visible by default."""
    parent = sessions.alias("vparent")
    branch_or_orphan = (
        select(parent.c.id)
        .where(parent.c.root_session_id == sessions.c.root_session_id,
               parent.c.id == sessions.c.parent_session_id,
               or_(parent.c.end_reason != BRANCHED, parent.c.ended_at.is_(None),
                   sessions.c.started_at < parent.c.ended_at))
        .exists())
    return or_(sessions.c.parent_session_id.is_(None), ~branch_or_orphan)


def list_sessions_rich(conn: Executor, *, source: str | None = None,
                       exclude_sources: Sequence[str] | None = None, limit: int = 20,
                       offset: int = 0, include_children: bool = False,
                       project_compression_tips: bool = True,
                       order_by_last_active: bool = False,
                       where: Any = None, pinned_first: bool = False,
                       now: float | None = None,
                       include_hidden: bool = False) -> list[dict[str, Any]]:
    """Session rows plus ``preview`` and ``last_active`` (docs/contracts.md#listing).

    ``where`` is an extra clause over ``sessions`` (the CLI's filter set); ``pinned_first``
    puts pinned rows before the others (``hermes-store list``); sessions the agent marks
    ``hidden`` are left out unless ``include_hidden``."""
    now = time.time() if now is None else now
    query = rich_query(conn, source=source, exclude_sources=exclude_sources, limit=limit,
                       offset=offset, include_children=include_children,
                       order_by_last_active=order_by_last_active, where=where,
                       pinned_first=pinned_first, now=now,
                       hidden=None if include_hidden else not_hidden(conn))
    rows = with_prompts(conn, [_finish_row(r) for r in conn.execute(query).mappings()])
    if project_compression_tips and not include_children:
        rows = [_project(conn, row, now) for row in rows]
    return rows


def rich_query(conn: Executor | None, *, source: str | None = None,
               exclude_sources: Sequence[str] | None = None, limit: Any = 20, offset: Any = 0,
               include_children: bool = False, order_by_last_active: bool = False,
               where: Any = None, pinned_first: bool = False, now: Any = None,
               hidden: Any = None) -> Select[*tuple[Any, ...]]:
    """:func:`list_sessions_rich`'s statement; ``hidden`` is :func:`not_hidden`'s clause or
    None (``conn`` only tells a distributed store's lineage walk; repo.prepared_build passes
    None and bound parameters for the limits and ``now``)."""
    last_active = lineage.last_activity(sessions, now)
    query = tip_row_query(now).where(*_source_filters(source, exclude_sources))
    if where is not None:
        query = query.where(where)
    if not include_children:
        query = query.where(visible_clause())
    if hidden is not None:
        query = query.where(hidden)
    if pinned_first:
        query = query.order_by(sessions.c.pinned.desc())
    if order_by_last_active:
        # A row that did not end 'compression' is a chain of one: its own activity counts.
        chain = lineage.lineage_activity(conn, now=now, compressed_only=True).subquery("chain")
        chain_active = (select(chain.c.last_active).where(chain.c.root_id == sessions.c.id)
                        .scalar_subquery())
        query = query.order_by(func.coalesce(chain_active, last_active).desc(),
                               sessions.c.started_at.desc(), sessions.c.id.desc())
    else:
        query = query.order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
    return query.limit(limit).offset(offset)


def tip_row_query(now: Any) -> Select[*tuple[Any, ...]]:
    """Every column plus ``preview`` and ``last_active``: a listing row before its filters."""
    return (select(literal_column("*"),
                   preview_source(sessions.c.id, sessions.c.root_session_id).label("preview"),
                   lineage.last_activity(sessions, now).label("last_active"))
            .select_from(sessions))


def _project(conn: Executor, row: dict[str, Any], now: float) -> dict[str, Any]:
    """A compression-ended row shows its lineage tip (:func:`session_rows.project`)."""

    def tip_row(tip_id: str) -> dict[str, Any] | None:
        tip = conn.execute(tip_row_query(now).where(sessions.c.id == tip_id)).mappings().first()
        return None if tip is None else with_prompts(conn, [_finish_row(tip)])[0]

    return session_rows.project(row, lambda sid: lineage.tip_of(conn, sid), tip_row)


def search_sessions(conn: Executor, *, source: str | None = None, limit: int | None = 20,
                    offset: int = 0, now: float | None = None) -> list[dict[str, Any]]:
    """Session columns plus ``last_active``, newest activity first; no child filter."""
    last_active = lineage.last_activity(sessions, now).label("last_active")
    query: Select[*tuple[Any, ...]] = (
        select(literal_column("*"), last_active).select_from(sessions)
        .where(*_source_filters(source, None))
        .order_by(last_active.desc(), sessions.c.started_at.desc(), sessions.c.id.desc()))
    if limit is not None:
        query = query.limit(limit)
    if offset:
        query = query.offset(offset)
    return with_prompts(conn, [dict(r) for r in conn.execute(query).mappings()])


def iter_session_ids_for_export(conn: Executor, *, source: str | None = None,
                                now: float | None = None) -> list[tuple[str, float]]:
    """``(id, last_active)`` of every session in ``search_sessions`` order (no cap)."""
    last_active = lineage.last_activity(sessions, now).label("last_active")
    query = (select(sessions.c.id, last_active).where(*_source_filters(source, None))
             .order_by(last_active.desc(), sessions.c.started_at.desc(), sessions.c.id.desc()))
    return [(r.id, r.last_active) for r in conn.execute(query)]


def sessions_by_id(conn: Executor, ids: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Full rows of the given sessions, in batches of bound parameters."""
    for start in range(0, len(ids), 900):
        chunk = list(ids[start:start + 900])
        yield from with_prompts(conn, [full_row(r) for r in conn.execute(
            select(literal_column("*")).select_from(sessions)
            .where(sessions.c.id.in_(chunk))).mappings()])



# --------------------------------------------------------------------------- the command line


# The reference that names the most recently active session (a session called so still wins).
LATEST = "latest"


def resolve_ref(conn: Executor, ref: str) -> str:
    """A full id, or a unique prefix of at least ``MIN_PREFIX`` characters (an exact id wins),
    or ``latest``: the session with the newest activity.

    SessionNotFoundError for none; AmbiguousSessionError for several, carrying up to
    ``MAX_CANDIDATES`` of them with their title and last activity."""
    ref = ref.strip()
    if exists(conn, ref):
        return ref
    if ref == LATEST:
        newest = search_sessions(conn, limit=1)
        if not newest:
            raise SessionNotFoundError(ref, "the store holds no sessions yet")
        return str(newest[0]["id"])
    if len(ref) < MIN_PREFIX:
        raise SessionNotFoundError(ref, f"no session is called {ref!r}, and a prefix needs at "
                                        f"least {MIN_PREFIX} characters")
    found = ids_with_prefix(conn, ref, limit=MAX_CANDIDATES + 1)
    if not found:
        raise SessionNotFoundError(ref)
    if len(found) == 1:
        return found[0]
    shown = found[:MAX_CANDIDATES]
    total = len(found) if len(found) <= MAX_CANDIDATES else count_with_prefix(conn, ref)
    raise AmbiguousSessionError(ref, shown, candidate_rows(conn, shown), total=total)


def resolve_refs(conn: Executor, refs: Sequence[str]) -> list[str]:
    """:func:`resolve_ref` of each, duplicates dropped, order kept."""
    return list(dict.fromkeys(resolve_ref(conn, ref) for ref in refs))


def lineage_tip(conn: Executor, session_id: str) -> str:
    """The compression tip of ``session_id`` (itself when the conversation did not continue)."""
    return lineage.tip_of(conn, session_id) or session_id


def last_active_of(conn: Executor, session_id: str) -> float | None:
    return conn.execute(select(lineage.last_activity(sessions))
                        .where(sessions.c.id == session_id)).scalar()


def children_of(conn: Executor, session_id: str) -> list[str]:
    """Sessions whose parent is ``session_id`` (continuations, branches, delegates), by start."""
    return list(conn.execute(select(sessions.c.id)
                             .where(sessions.c.parent_session_id == session_id)
                             .order_by(sessions.c.started_at, sessions.c.id)).scalars())


def candidate_rows(conn: Executor, ids: Sequence[str]) -> list[dict[str, Any]]:
    """``id, title, last_active`` of the sessions an ambiguous prefix matched, by id."""
    query = (select(sessions.c.id, sessions.c.title,
                    lineage.last_activity(sessions).label("last_active"))
             .where(sessions.c.id.in_(list(ids))).order_by(sessions.c.id))
    return [dict(r) for r in conn.execute(query).mappings()]


def session_with_activity(conn: Executor, session_id: str) -> dict[str, Any]:
    """Every column plus ``last_active`` and ``lineage_tip_id`` (``{"id": …}`` when gone)."""
    row = conn.execute(select(sessions, lineage.last_activity(sessions).label("last_active"))
                       .where(sessions.c.id == session_id)).mappings().first()
    item = dict(row) if row is not None else {"id": session_id}
    item["lineage_tip_id"] = lineage_tip(conn, session_id)
    return item


@dataclass
class ListingPage:
    """One page of ``hermes-store list``: the rows and whether more sessions match."""

    rows: list[dict[str, Any]]
    more: bool


def list_matching(conn: Connection, flt: SessionFilter, *, limit: int = 20, offset: int = 0,
                  include_archived: bool = False, only_archived: bool = False,
                  only_pinned: bool = False, only_open: bool = False,
                  include_children: bool = False, include_hidden: bool = False) -> ListingPage:
    """``hermes-store list``: visible lineage tips passing the filter (activity over the whole
    lineage), pinned first, then by last activity; ``more`` from fetching one row extra."""
    clauses = [c for c in (matching(conn, flt, by_lineage=True),) if c is not None]
    clauses += flag_clauses(include_archived=include_archived, only_archived=only_archived,
                            only_pinned=only_pinned, only_open=only_open)
    rows = list_sessions_rich(conn, limit=limit + 1, offset=offset,
                              include_children=include_children, order_by_last_active=True,
                              pinned_first=True, where=and_(*clauses) if clauses else None,
                              now=flt.now, include_hidden=include_hidden)
    return ListingPage(rows[:limit], len(rows) > limit)


def flag_clauses(*, include_archived: bool = False, only_archived: bool = False,
                 only_pinned: bool = False, only_open: bool = False) -> list[Any]:
    """:func:`list_matching`'s clauses for its flags."""
    clauses = []
    if only_archived:
        clauses.append(sessions.c.archived != 0)
    elif not include_archived:
        clauses.append(sessions.c.archived == 0)
    if only_pinned:
        clauses.append(sessions.c.pinned != 0)
    if only_open:
        clauses.append(sessions.c.ended_at.is_(None))
    return clauses


def matching_ids(conn: Connection, flt: SessionFilter, *, ended_only: bool = False) -> list[str]:
    """Ids of the sessions passing the filter, oldest start first (parents before their
    continuations): the order an export writes them in."""
    clauses = [c for c in (matching(conn, flt),) if c is not None]
    if ended_only:
        clauses.append(sessions.c.ended_at.is_not(None))
    return list(conn.execute(select(sessions.c.id).where(and_(*clauses))
                             .order_by(sessions.c.started_at, sessions.c.id)).scalars())


def most_recent_id(conn: Executor) -> str | None:
    """The session with the newest activity (``export --format trace`` with no selection)."""
    last = lineage.last_activity(sessions)
    return conn.execute(select(sessions.c.id)
                        .order_by(last.desc(), sessions.c.id.desc()).limit(1)).scalar()
