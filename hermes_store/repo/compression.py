"""Compression: the v21 continuation rules, the lineage walks built on them, the advisory state
on ``sessions`` (failure cooldown, fallback streak) and the ``compression_locks`` table.

A *continuation* of P is a child of P where P ended ``'compression'``, the child carries neither
marker (:mod:`hermes_store.repo.markers`) and its ``source`` is not ``'tool'``; no timing
condition. The *tip step* goes from P to its best continuation: one that itself ended
``'compression'``, then an open one, then the rest; then the newest activity (newest message,
else ``started_at``), ``started_at`` and ``id``, all descending. Tip, lineage, resume and the
v21 listing all walk by this one step, so they agree on where a conversation went.

These rules differ from :mod:`hermes_store.repo.lineage` (the v11 facade's ``get_lineage_tip``
and retention): that walk follows any child of a compression-ended parent, preferring one
started after the end. Both stay: v11 callers keep their answers.

Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    CTE,
    BindParameter,
    ColumnElement,
    Float,
    FromClause,
    Row,
    ScalarSelect,
    Select,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from hermes_store.db.models import COMPRESSION_LOCKS, MESSAGES, SESSIONS
from hermes_store.repo import lineage, markers
from hermes_store.repo import sessions as sessions_repo
from hermes_store.repo.executor import Executor, rowcount

sessions = SESSIONS
messages = MESSAGES
locks = COMPRESSION_LOCKS

COMPRESSION = "compression"
BRANCHED = "branched"
TOOL_SOURCE = "tool"
ORPHANED_COMPRESSION = "orphaned_compression"
ORPHAN_AGE_S = 7 * 86400.0
MAX_TIP_STEPS = 100

# A session's row and its plain-tree ancestors as the single-session walks read them: depth,
# id, parent_session_id, end_reason, ended_at, started_at, model_config, source.
AncestorRow = Row[int, str, str | None, str | None, float | None, float | None, str | None,
                  str | None]

# Built once: an alias of the 50-column table costs milliseconds to build, and the tip walk
# builds its statement on every step.
_CONT, _CONT_PARENT = sessions.alias("cont"), sessions.alias("cont_parent")
_CHAIN_NEXT, _CHAIN_SEG = sessions.alias("chain_next"), sessions.alias("chain_seg")
_ORPHAN_PARENT = sessions.alias("orphan_parent")


# --------------------------------------------------------------------------- the step rule


def may_continue(child: FromClause) -> ColumnElement[bool]:
    """The child's side of "continuation": neither marker, and not a tool session."""
    return ~markers.carries_any_clause(child.c.model_config) \
        & (func.coalesce(child.c.source, "") != TOOL_SOURCE)


def activity(table: FromClause, now: float | ColumnElement[float]) -> ColumnElement[float]:
    """A segment's activity for the step rule: its newest sane message, else ``started_at``."""
    newest = lineage.newest_message_at(table.c.id, now, table.c.root_session_id)
    return func.coalesce(newest, table.c.started_at)


def best_continuation(parent_id: lineage.Ref, now: float | ColumnElement[float],
                      root: lineage.Ref) -> ScalarSelect[str | None]:
    """The id of the continuation the tip step takes from ``parent_id`` (NULL: none).

    ``parent_id`` and ``root`` (the parent's lineage root) are values or columns (correlated:
    a recursive walk steps with them). Parent and child share the root, so both sides of the
    step stay on the root's shard."""
    child, parent = _CONT, _CONT_PARENT
    rank = case((child.c.end_reason == COMPRESSION, 0), (child.c.ended_at.is_(None), 1),
                else_=2)
    return (select(child.c.id)
            .join_from(child, parent, and_(parent.c.root_session_id == child.c.root_session_id,
                                           parent.c.id == child.c.parent_session_id))
            .where(child.c.root_session_id == root, parent.c.id == parent_id,
                   parent.c.end_reason == COMPRESSION, may_continue(child))
            .order_by(rank, activity(child, now).desc(), child.c.started_at.desc(),
                      child.c.id.desc())
            .limit(1).scalar_subquery())


def chain_map(anchor_ids: Select[str, str], *, now: float, max_depth: int = MAX_TIP_STEPS,
              conn: Executor | None = None) -> CTE:
    """``(root_id, id, lineage_root, depth)``: each anchor (depth 0) and the segments its tip
    steps reach. ``anchor_ids`` selects ``(id, root_session_id)`` of the anchors; every step
    stays within the anchor's stored root (``lineage_root``).

    A cycle repeats segments until ``max_depth``; consumers aggregate (activity, matching), so
    a repeat changes nothing. The single-session walks below stop at a cycle instead.

    Given ``conn`` on a distributed store the chain is walked here (Citus runs a recursive CTE
    only with a constant filter on the distribution column); each step still runs in SQL."""
    if conn is not None and lineage.distributed_store(conn):
        return _chain_walked_here(conn, anchor_ids, now, max_depth)
    anchors = anchor_ids.subquery("chain_anchor")
    first, tree_root = anchors.c[0], anchors.c[1]
    walk = select(first.label("root_id"), first.label("id"), tree_root.label("lineage_root"),
                  literal(0).label("depth")).cte("v21_chain", recursive=True)
    nxt = _CHAIN_NEXT
    return walk.union_all(
        select(walk.c.root_id, nxt.c.id, walk.c.lineage_root, walk.c.depth + 1)
        .join_from(walk, nxt, and_(
            nxt.c.root_session_id == walk.c.lineage_root,
            nxt.c.id == best_continuation(walk.c.id, now, walk.c.lineage_root)))
        .where(walk.c.depth < max_depth))


def _chain_walked_here(conn: Executor, anchor_ids: Select[str, str], now: float,
                       max_depth: int) -> CTE:
    s = sessions.alias("chain_all")
    step: dict[str, str | None] = dict(conn.execute(select(
        s.c.id, best_continuation(s.c.id, now, s.c.root_session_id))).all())
    found: list[tuple[str, str, str, int]] = []
    for first, tree_root in conn.execute(anchor_ids).all():
        node: str | None = first
        depth = 0
        while node is not None:  # as the CTE's UNION ALL: a cycle repeats until max_depth
            found.append((first, node, tree_root, depth))
            node, depth = (step.get(node) if depth < max_depth else None), depth + 1
    return lineage.walked_rows("v21_walk", ("root_id", "id", "lineage_root", "depth"),
                               found).cte("v21_chain")


def chain_activity(chain: CTE, *, now: float) -> Select[str, float]:
    """``(root_id, last_active)``: the newest activity over each anchor's chain."""
    seg = _CHAIN_SEG
    return (select(chain.c.root_id, func.max(activity(seg, now)).label("last_active"))
            .join_from(chain, seg, seg.c.id == chain.c.id).group_by(chain.c.root_id))


@functools.cache
def _tip_step() -> Select[str | None]:
    """One tip step, built once over ``parent``, ``now`` and ``root`` (building it costs more
    than running it, and a walk takes one per segment)."""
    parent: BindParameter[str] = bindparam("parent")
    root: BindParameter[str] = bindparam("root")
    return select(best_continuation(parent, bindparam("now", type_=Float), root))


def tip_path(conn: Executor, session_id: str, *, now: float,
             max_steps: int = MAX_TIP_STEPS) -> list[str]:
    """``[session_id, …, tip]`` by the tip step; stops at none, a cycle or ``max_steps``."""
    path, seen = [session_id], {session_id}
    root = lineage.root_of(conn, session_id)
    while root is not None and len(path) <= max_steps:
        nxt = conn.execute(_tip_step(), {"parent": path[-1], "now": now, "root": root}).scalar()
        if nxt is None or nxt in seen:
            break
        path.append(nxt)
        seen.add(nxt)
    return path


def compression_tip(conn: Executor, session_id: str, *, now: float) -> str:
    """Where the session's conversation went; the id itself when it has no continuation
    (unknown ids included)."""
    return tip_path(conn, session_id, now=now)[-1]


def _is_branch_child(row: AncestorRow, parent: AncestorRow | None) -> bool:
    if markers.carries(row.model_config, markers.BRANCHED_FROM):
        return True
    return (parent is not None and parent.end_reason == BRANCHED and parent.ended_at is not None
            and row.started_at is not None and row.started_at >= parent.ended_at)


def _continues(child: AncestorRow, parent: AncestorRow) -> bool:
    return (parent.end_reason == COMPRESSION and not markers.carries_any(child.model_config)
            and (child.source or "") != TOOL_SOURCE)


def _ancestor_rows(conn: Executor, session_id: str) -> Sequence[AncestorRow]:
    """The session's row and its plain-tree ancestors, nearest first (``[]`` if unknown)."""
    root = lineage.root_of(conn, session_id)
    if root is None:
        return []
    rows = conn.execute(_ancestor_rows_query(), {"sid": session_id, "root": root}).all()
    return rows if rows and rows[0].id == session_id else []


@functools.cache
def _ancestor_rows_query() -> Select[int, str, str | None, str | None, float | None,
                                    float | None, str | None, str | None]:
    up = lineage.prepared("ancestors").subquery("up")
    return (select(up.c.depth, sessions.c.id, sessions.c.parent_session_id,
                   sessions.c.end_reason, sessions.c.ended_at, sessions.c.started_at,
                   sessions.c.model_config, sessions.c.source)
            .join_from(up, sessions, and_(sessions.c.root_session_id == bindparam("root"),
                                          sessions.c.id == up.c.id))
            .order_by(up.c.depth))


def _continued_from(rows: Sequence[AncestorRow]) -> list[AncestorRow]:
    """Of ``_ancestor_rows``: the continuation parents above the first row, nearest first."""
    path, below = [], rows[0]
    for above in rows[1:]:
        # ancestors() reports each id once, so a cycle ends the list; a gap in the depths
        # (a parent row that is gone) ends the walk as well.
        if above.id != below.parent_session_id or not _continues(below, above):
            break
        path.append(above)
        below = above
    return path


def continuation_ancestors(conn: Executor, session_id: str) -> list[str]:
    """The segments the session continues, nearest first: its parent while that ended
    ``'compression'`` and the child is a continuation, then that parent's, and so on."""
    rows = _ancestor_rows(conn, session_id)
    return [row.id for row in _continued_from(rows)] if rows else []


def compression_lineage(conn: Executor, session_id: str, *, now: float) -> list[str]:
    """Ids root → tip of the session's lineage: ``[]`` if unknown, ``[session_id]`` for a
    branch child or a segment the tip step from its root does not pass through."""
    rows = _ancestor_rows(conn, session_id)
    if not rows:
        return []
    parent = rows[1] if len(rows) > 1 and rows[1].id == rows[0].parent_session_id else None
    if _is_branch_child(rows[0], parent):
        return [session_id]
    root = ([rows[0], *_continued_from(rows)])[-1]
    path = tip_path(conn, root.id, now=now)
    return path if session_id in path else [session_id]


def lineage_members(conn: Executor, session_id: str) -> list[str]:
    """The session's whole lineage (docs/v21.md#bulk): the root it continues from and every
    continuation below that root, by depth (``[]`` if unknown). Bulk moves act on this set."""
    rows = _ancestor_rows(conn, session_id)
    if not rows:
        return []
    members = [[rows[0], *_continued_from(rows)][-1].id]
    frontier, seen = list(members), set(members)
    child, parent = _CONT, _CONT_PARENT
    root = lineage.root_of(conn, session_id)
    while frontier:
        found = [sid for sid in conn.execute(
            select(child.c.id)
            .join_from(child, parent, and_(parent.c.root_session_id == child.c.root_session_id,
                                           parent.c.id == child.c.parent_session_id))
            .where(child.c.root_session_id == root, parent.c.id.in_(frontier),
                   parent.c.end_reason == COMPRESSION,
                   may_continue(child)).order_by(child.c.started_at, child.c.id)).scalars()
            if sid not in seen]
        members += found
        seen.update(found)
        frontier = found
    return members


def lineage_roots(conn: Executor) -> dict[str, tuple[str, int]]:
    """Every session's ``(root id, depth)`` under the continuation relation, for grouping a
    whole store into lineages at once. Members of a continuation cycle share the smallest id
    of the cycle as their root."""
    marked = markers.carries_any_clause(sessions.c.model_config)
    rows = conn.execute(select(sessions.c.id, sessions.c.parent_session_id, sessions.c.end_reason,
                               sessions.c.source, marked.label("marked"))).all()
    by_id = {row.id: row for row in rows}

    def up(row: Row[str, str | None, str | None, str | None, bool]) -> str | None:
        parent = by_id.get(row.parent_session_id)
        if parent is None or parent.end_reason != COMPRESSION or row.marked \
                or (row.source or "") == TOOL_SOURCE:
            return None
        return str(parent.id)

    found: dict[str, tuple[str, int]] = {}
    for row in rows:
        path = [row.id]
        while (nxt := up(by_id[path[-1]])) is not None and nxt not in path:
            path.append(nxt)
        root = path[-1]
        if nxt is not None:  # a cycle: from nxt's first visit to the end
            root = min(path[path.index(nxt):])
        found[row.id] = (root, len(path) - 1 if nxt is None else path.index(root))
    return found


def set_title(conn: Executor, session_id: str, title: str | None) -> bool:
    """``set_session_title`` (docs/v21.md#behaviour-changes): a title held by a segment this
    session continues moves here, so a tip can take back its conversation's name; any other
    holder is a clash (``ValueError``). False for an unknown session."""
    movable = continuation_ancestors(conn, session_id) if title is not None else []
    return sessions_repo.set_title(conn, session_id, title, movable_from=movable)


def finalize_orphaned(conn: Executor, *, now: float) -> int:
    """End open continuations the agent abandoned: no API call, a message, a parent ended
    ``'compression'``, started over 7 days ago. Returns how many."""
    parent = _ORPHAN_PARENT
    has_message = exists(select(messages.c.id).where(messages.c.session_id == sessions.c.id))
    compressed_parent = exists(select(parent.c.id).where(
        parent.c.root_session_id == sessions.c.root_session_id,
        parent.c.id == sessions.c.parent_session_id, parent.c.end_reason == COMPRESSION))
    result = conn.execute(
        update(sessions)
        .where(sessions.c.ended_at.is_(None), sessions.c.end_reason.is_(None),
               sessions.c.api_call_count == 0, sessions.c.started_at < now - ORPHAN_AGE_S,
               has_message, compressed_parent)
        .values(ended_at=now, end_reason=ORPHANED_COMPRESSION))
    return rowcount(result)


# --------------------------------------------------------------------------- advisory state


def record_cooldown(conn: Executor, session_id: str, until: float | None,
                    error: str | None) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(
        compression_failure_cooldown_until=until, compression_failure_error=error))


def cooldown(conn: Executor, session_id: str) -> tuple[Any, str | None] | None:
    """The stored ``(cooldown_until, error)``, expired or not; None for an unknown session."""
    row = conn.execute(select(sessions.c.compression_failure_cooldown_until,
                              sessions.c.compression_failure_error)
                       .where(sessions.c.id == session_id)).first()
    return (row[0], row[1]) if row is not None else None


def clear_cooldown(conn: Executor, session_id: str) -> None:
    record_cooldown(conn, session_id, None, None)


def fallback_streak(conn: Executor, session_id: str) -> Any:
    """The stored value as is (the facade decides what a stored oddity means)."""
    return conn.execute(select(sessions.c.compression_fallback_streak)
                        .where(sessions.c.id == session_id)).scalar()


def set_fallback_streak(conn: Executor, session_id: str, streak: int) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(compression_fallback_streak=streak))


# --------------------------------------------------------------------------- locks


def _holder(conn: Executor, session_id: str, *, live_at: float | None = None) -> str | None:
    query = select(locks.c.holder).where(locks.c.session_id == session_id)
    if live_at is not None:
        query = query.where(locks.c.expires_at >= live_at)
    return conn.execute(query).scalar()


def try_acquire_lock(conn: Executor, session_id: str, holder: str, ttl: float, *,
                     now: float) -> bool:
    """Take the lock unless another holder has a live one; an own live lock is kept as it is
    (not extended). Of concurrent callers exactly one sees its own name afterwards."""
    conn.execute(delete(locks).where(locks.c.session_id == session_id,
                                     locks.c.expires_at < now))
    current = _holder(conn, session_id)
    if current is None:
        try:
            # SQLite's write lock already serialises callers; on a backend that lets two
            # transactions get here, the primary key picks the winner and the loser reads it.
            with conn.begin_nested():
                conn.execute(insert(locks).values(session_id=session_id, holder=holder,
                                                  acquired_at=now, expires_at=now + ttl))
            return True
        except IntegrityError:
            current = _holder(conn, session_id)
    return current == holder


def refresh_lock(conn: Executor, session_id: str, holder: str, ttl: float, *,
                 now: float) -> bool:
    """Extend a live lock held by ``holder``; an expired one is never revived."""
    result = conn.execute(update(locks).where(
        locks.c.session_id == session_id, locks.c.holder == holder, locks.c.expires_at >= now)
        .values(expires_at=now + ttl))
    return bool(rowcount(result))


def release_lock(conn: Executor, session_id: str, holder: str) -> None:
    """Only the holder's own row goes: a late compressor never frees its successor's lock."""
    conn.execute(delete(locks).where(locks.c.session_id == session_id, locks.c.holder == holder))


def lock_holder(conn: Executor, session_id: str, *, now: float) -> str | None:
    return _holder(conn, session_id, live_at=now)

