"""Session lineage as SQLAlchemy Core recursive CTEs, and the one "last activity" expression.

Sessions link to a parent through ``parent_session_id``. Two kinds of walk exist:

* the plain tree (``ancestors``/``descendants``): every parent link, whatever its reason;
* the **compression chain**: a parent ended with ``end_reason='compression'`` continues in its
  newest child started at or after that end, else its newest child (``continuation_id``). A
  chain is one logical conversation: resume goes to its tip, retention treats it as a unit, listing shows its tip.

Every walk carries a depth and stops at ``max_depth`` (100 by default), so a cycle in damaged
data ends instead of looping. Each function returns a ``Select``; the caller runs it on its own
connection or session.
"""

from __future__ import annotations

import time

from sqlalchemy import ColumnElement, FromClause, Select, and_, case, exists, func, literal, select

from hermes_store.content import SANE_FUTURE_S, SANE_MIN_TS
from hermes_store.db.dialect import greatest
from hermes_store.db.models import ChatSession, Message

sessions = ChatSession.__table__
messages = Message.__table__

DEFAULT_MAX_DEPTH = 100
COMPRESSION = "compression"


# --------------------------------------------------------------------------- plain tree


def _tree_walk(session_id: str, *, up: bool, max_depth: int) -> Select:
    anchor = select(sessions.c.id, sessions.c.parent_session_id,
                    literal(0).label("depth")).where(sessions.c.id == session_id)
    walk = anchor.cte("ancestors" if up else "descendants", recursive=True)
    step = sessions.alias("step")
    link = (step.c.id == walk.c.parent_session_id) if up else (step.c.parent_session_id == walk.c.id)
    walk = walk.union_all(
        select(step.c.id, step.c.parent_session_id, walk.c.depth + 1)
        .where(link, walk.c.depth < max_depth)
    )
    # A cycle revisits ids until the depth bound; each id is reported once, at its first depth.
    depth = func.min(walk.c.depth).label("depth")
    return (select(walk.c.id, walk.c.parent_session_id, depth)
            .group_by(walk.c.id, walk.c.parent_session_id).order_by(depth, walk.c.id))


def ancestors(session_id: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """``(id, parent_session_id, depth)`` of the session (depth 0) and each ancestor above it."""
    return _tree_walk(session_id, up=True, max_depth=max_depth)


def descendants(session_id: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """``(id, parent_session_id, depth)`` of the session (depth 0) and everything below it."""
    return _tree_walk(session_id, up=False, max_depth=max_depth)


# --------------------------------------------------------------------------- compression chain


def continuation_id(parent_id: ColumnElement, parent_ended_at: ColumnElement) -> ColumnElement:
    """The id of the child a compression-ended parent continues in (None if there is none)."""
    # Normally the continuation starts at or after the parent's end. Clocks and importers do
    # not always agree (the agent's own fixture stores end the parent after creating its child),
    # and a compression-ended parent with children is always continued somewhere: so prefer a
    # child started at/after the end, else the newest child.
    after, any_child = sessions.alias("cont"), sessions.alias("cont_any")
    newest_after = (select(after.c.id)
                    .where(after.c.parent_session_id == parent_id,
                           after.c.started_at >= parent_ended_at)
                    .order_by(after.c.started_at.desc(), after.c.id.desc())
                    .limit(1).scalar_subquery())
    newest = (select(any_child.c.id)
              .where(any_child.c.parent_session_id == parent_id)
              .order_by(any_child.c.started_at.desc(), any_child.c.id.desc())
              .limit(1).scalar_subquery())
    return func.coalesce(newest_after, newest)


def compression_chain(session_id: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """``(id, depth)`` of the session (depth 0) and its compression continuations, in order."""
    anchor = select(sessions.c.id, sessions.c.end_reason, sessions.c.ended_at,
                    literal(0).label("depth")).where(sessions.c.id == session_id)
    walk = anchor.cte("compression_chain", recursive=True)
    nxt = sessions.alias("nxt")
    walk = walk.union_all(
        select(nxt.c.id, nxt.c.end_reason, nxt.c.ended_at, walk.c.depth + 1)
        .join_from(walk, nxt, nxt.c.id == continuation_id(walk.c.id, walk.c.ended_at))
        .where(walk.c.end_reason == COMPRESSION, walk.c.depth < max_depth)
    )
    return select(walk.c.id, walk.c.depth).order_by(walk.c.depth)


def compression_tip(session_id: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """The one-row ``(id, depth)`` of the chain's tip (the session itself when not compressed)."""
    chain = compression_chain(session_id, max_depth=max_depth).subquery("chain")
    return select(chain.c.id, chain.c.depth).order_by(chain.c.depth.desc()).limit(1)


def compression_root(session_id: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """The one-row ``(id, depth)`` of the first segment of the chain this session belongs to."""
    anchor = select(sessions.c.id, sessions.c.parent_session_id,
                    literal(0).label("depth")).where(sessions.c.id == session_id)
    walk = anchor.cte("compression_up", recursive=True)
    parent = sessions.alias("up")
    walk = walk.union_all(
        select(parent.c.id, parent.c.parent_session_id, walk.c.depth + 1)
        .join_from(walk, parent, parent.c.id == walk.c.parent_session_id)
        .where(parent.c.end_reason == COMPRESSION, walk.c.depth < max_depth,
               continuation_id(parent.c.id, parent.c.ended_at) == walk.c.id)
    )
    return select(walk.c.id, walk.c.depth).order_by(walk.c.depth.desc()).limit(1)


def is_continuation(table: FromClause) -> ColumnElement[bool]:
    """True for a row that continues a compression-ended parent (not a lineage root)."""
    parent = sessions.alias("cparent")
    return exists(select(literal(1)).where(
        parent.c.id == table.c.parent_session_id, parent.c.end_reason == COMPRESSION,
        continuation_id(parent.c.id, parent.c.ended_at) == table.c.id))


def lineage_map(*, max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """``(id, root_id, depth)`` for every session reachable from a lineage root.

    A root is a session that is not a compression continuation. Sessions caught in a cycle of
    continuations have no root and are absent; callers treat each as its own lineage.
    """
    s = sessions.alias("s")
    anchor = select(s.c.id, s.c.id.label("root_id"), s.c.end_reason, s.c.ended_at,
                    literal(0).label("depth")).where(~is_continuation(s))
    walk = anchor.cte("lineage_map", recursive=True)
    nxt = sessions.alias("nxt")
    walk = walk.union_all(
        select(nxt.c.id, walk.c.root_id, nxt.c.end_reason, nxt.c.ended_at, walk.c.depth + 1)
        .join_from(walk, nxt, nxt.c.id == continuation_id(walk.c.id, walk.c.ended_at))
        .where(walk.c.end_reason == COMPRESSION, walk.c.depth < max_depth)
    )
    return select(walk.c.id, walk.c.root_id, walk.c.depth)


# --------------------------------------------------------------------------- last activity


def _sane(value: ColumnElement, now: float) -> ColumnElement:
    return case((value.between(SANE_MIN_TS, now + SANE_FUTURE_S), value), else_=None)


def newest_message_at(session_id: ColumnElement, now: float | None = None) -> ColumnElement:
    """The newest sane message timestamp of a session (walks ``idx_messages_session``)."""
    now = time.time() if now is None else now
    return (select(func.max(messages.c.timestamp))
            .where(messages.c.session_id == session_id,
                   messages.c.timestamp.between(SANE_MIN_TS, now + SANE_FUTURE_S))
            .scalar_subquery())


def last_activity(table: FromClause = sessions, now: float | None = None) -> ColumnElement:
    """THE last-activity expression shared by listing, prune, archive, close and export.

    The newest of ``last_activity_at``, the newest message timestamp and ``started_at``, each
    ignored when outside [2000-01-01, now + 1 day]; when all are garbage, ``started_at`` as is.
    """
    now = time.time() if now is None else now
    candidates = (
        func.coalesce(_sane(table.c.last_activity_at, now), -1.0),
        func.coalesce(newest_message_at(table.c.id, now), -1.0),
        func.coalesce(_sane(table.c.started_at, now), -1.0),
    )
    # SQLite's scalar max() returns NULL if any argument is NULL, hence the -1 stand-ins.
    return func.coalesce(func.nullif(greatest(*candidates), -1.0), table.c.started_at)


def lineage_activity(*, now: float | None = None,
                     max_depth: int = DEFAULT_MAX_DEPTH) -> Select:
    """``(root_id, last_active)``: the newest activity over every segment of each lineage."""
    lmap = lineage_map(max_depth=max_depth).subquery("lmap")
    seg = sessions.alias("seg")
    return (select(lmap.c.root_id, func.max(last_activity(seg, now)).label("last_active"))
            .join_from(lmap, seg, and_(seg.c.id == lmap.c.id))
            .group_by(lmap.c.root_id))
