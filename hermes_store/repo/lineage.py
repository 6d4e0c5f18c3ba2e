"""Session lineage as SQLAlchemy Core recursive CTEs, the stored lineage root, and the one
"last activity" expression.

Sessions link to a parent through ``parent_session_id``. Two kinds of walk exist:

* the plain tree (``ancestors``/``descendants``): every parent link, whatever its reason;
* the **compression chain**: a parent ended with ``end_reason='compression'`` continues in its
  newest child started at or after that end, else its newest child (``continuation_id``). A
  chain is one logical conversation: resume goes to its tip, retention treats it as a unit, listing shows its tip.

**The root.** Every session carries ``root_session_id``: the topmost ancestor reached by parent
links (itself for a session without a parent, or whose parent row is gone). The write units keep
it (:func:`reroot` after any link changes); SQLite triggers keep it for foreign writers. A whole
tree shares one root, so every single-lineage walk filters ``root_session_id = :root`` in its
anchor and in its recursive member, and whole-store walks join each step on the root: a
distributed engine sharding by the root answers a walk on one shard (docs/scale-out.md).

Every walk carries a depth and stops at ``max_depth`` (100 by default), so a cycle in damaged
data ends instead of looping. Each builder returns a ``Select``; the caller runs it on its own
connection or session. The runners (``root_of``, ``tip_of``, ``reroot``, ``refresh_roots``)
take a caller-owned connection and never commit.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any, Literal, overload

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    FromClause,
    Row,
    ScalarSelect,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session
from sqlalchemy.types import TEXT, Integer

from hermes_store.content import SANE_FUTURE_S, SANE_MIN_TS
from hermes_store.db import distribution
from hermes_store.db.dialect import greatest
from hermes_store.db.models import MESSAGES, SESSIONS
from hermes_store.repo.executor import Executor

sessions = SESSIONS
messages = MESSAGES

DEFAULT_MAX_DEPTH = 100
COMPRESSION = "compression"

# A session id as a builder takes it: a value, or an expression (a bound parameter, a column).
Ref = str | ColumnElement[str]
# Rows of the plain-tree walks and of the compression walks.
TreeWalk = Select[str, str | None, int]
ChainWalk = Select[str, int]
TreeWalks = Literal["ancestors", "descendants"]
ChainWalks = Literal["compression_chain", "compression_tip", "compression_root"]


# --------------------------------------------------------------------------- the root


# Built once: every walk of one lineage reads the root first.
_ROOT_OF: Select[str] = (select(func.coalesce(sessions.c.root_session_id, sessions.c.id))
            .where(sessions.c.id == bindparam("sid")))


def root_of(conn: Executor, session_id: str) -> str | None:
    """The lineage root stored on the session (None for an unknown id)."""
    return conn.execute(_ROOT_OF, {"sid": session_id}).scalar()


def _parent_root(session_id: str) -> ScalarSelect[str | None]:
    """The root a session should carry: its parent's (the parent itself for a parent whose
    own root is unset), or NULL when it has no parent row."""
    child, parent = sessions.alias("rr_child"), sessions.alias("rr_parent")
    return (select(func.coalesce(parent.c.root_session_id, parent.c.id))
            .join_from(child, parent, parent.c.id == child.c.parent_session_id)
            .where(child.c.id == session_id).scalar_subquery())


def subtree(conn: Executor, session_id: str) -> list[str]:
    """The session and everything below it, taken *before* its parent link changes (SQLite's
    relink trigger may move the top of the tree first; :func:`reroot` moves all of it)."""
    return [r.id for r in descendants_of(conn, session_id)] or [session_id]


def distributed_store(conn: Executor) -> bool:
    return distribution.distributed(conn.connection() if isinstance(conn, Session) else conn)


def reroot(conn: Executor, session_id: str, below: Sequence[str]) -> None:
    """After the session's parent link changed: give ``below`` (its :func:`subtree`) the root
    its new parent carries, or its own id when it has no parent row.

    Not on a distributed store: there the root is the distribution column, which Citus does
    not update, so a tree keeps the root it was created under (the walks stay within it)."""
    if distributed_store(conn):
        return
    new = conn.execute(select(func.coalesce(_parent_root(session_id), session_id))).scalar()
    for start in range(0, len(below), 900):
        conn.execute(update(sessions)
                     .where(sessions.c.id.in_(list(below[start:start + 900])),
                            sessions.c.root_session_id.is_distinct_from(new))
                     .values(root_session_id=new))


def refresh_roots(conn: Executor, *, max_depth: int = DEFAULT_MAX_DEPTH) -> int:
    """Recompute every session's root from the parent links (bulk loads link rows in any
    order); sessions in a parent cycle carry their own id. Returns how many rows changed.
    A distributed store's roots do not move (:func:`reroot`): nothing changes there."""
    if distributed_store(conn):
        return 0
    s, step = sessions.alias("rf_top"), sessions.alias("rf_step")
    top = sessions.alias("rf_parent")
    parent_gone = ~exists(select(top.c.id).where(top.c.id == s.c.parent_session_id))
    walk = (select(s.c.id, s.c.id.label("root_id"), literal(0).label("depth"))
            .where((s.c.parent_session_id.is_(None)) | parent_gone)
            .cte("root_walk", recursive=True))
    walk = walk.union_all(
        select(step.c.id, walk.c.root_id, walk.c.depth + 1)
        .join_from(walk, step, step.c.parent_session_id == walk.c.id)
        .where(walk.c.depth < max_depth))
    found = dict(conn.execute(select(walk.c.id, func.min(walk.c.root_id))
                              .group_by(walk.c.id)).all())
    held = conn.execute(select(sessions.c.id, sessions.c.root_session_id)).all()
    changed = [{"sid": sid, "root": found.get(sid, sid)} for sid, root in held
               if found.get(sid, sid) != root]
    stmt = (update(sessions).where(sessions.c.id == bindparam("sid"))
            .values(root_session_id=bindparam("root")))
    for start in range(0, len(changed), 900):
        conn.execute(stmt, changed[start:start + 900])
    return len(changed)


# --------------------------------------------------------------------------- plain tree


def _root_or_lookup(session_id: Ref, root: Ref | None) -> Ref:
    """The lineage root to filter on: the caller's (what a distributed engine routes by), else
    the session's stored root read in the statement itself."""
    if root is not None:
        return root
    own = sessions.alias("own_root")
    return select(own.c.root_session_id).where(own.c.id == session_id).scalar_subquery()


def _tree_walk(session_id: Ref, root: Ref, *, up: bool, max_depth: int) -> TreeWalk:
    anchor = select(sessions.c.id, sessions.c.parent_session_id,
                    literal(0).label("depth")).where(sessions.c.root_session_id == root,
                                                     sessions.c.id == session_id)
    walk = anchor.cte("ancestors" if up else "descendants", recursive=True)
    step = sessions.alias("step")
    link = (step.c.id == walk.c.parent_session_id) if up else (step.c.parent_session_id == walk.c.id)
    walk = walk.union_all(
        select(step.c.id, step.c.parent_session_id, walk.c.depth + 1)
        .where(step.c.root_session_id == root, link, walk.c.depth < max_depth)
    )
    # A cycle revisits ids until the depth bound; each id is reported once, at its first depth.
    depth = func.min(walk.c.depth).label("depth")
    return (select(walk.c.id, walk.c.parent_session_id, depth)
            .group_by(walk.c.id, walk.c.parent_session_id).order_by(depth, walk.c.id))


def ancestors(session_id: Ref, *, root: Ref | None = None,
              max_depth: int = DEFAULT_MAX_DEPTH) -> TreeWalk:
    """``(id, parent_session_id, depth)`` of the session (depth 0) and each ancestor above it
    (``root``: the session's lineage root, read from the row when not given)."""
    return _tree_walk(session_id, _root_or_lookup(session_id, root), up=True, max_depth=max_depth)


def descendants(session_id: Ref, *, root: Ref | None = None,
                max_depth: int = DEFAULT_MAX_DEPTH) -> TreeWalk:
    """``(id, parent_session_id, depth)`` of the session (depth 0) and everything below it."""
    return _tree_walk(session_id, _root_or_lookup(session_id, root), up=False, max_depth=max_depth)


@overload
def prepared(walk: TreeWalks, max_depth: int = ...) -> TreeWalk: ...
@overload
def prepared(walk: ChainWalks, max_depth: int = ...) -> ChainWalk: ...
@functools.cache
def prepared(walk: TreeWalks | ChainWalks,
             max_depth: int = DEFAULT_MAX_DEPTH) -> TreeWalk | ChainWalk:
    """A single-lineage walk built once over the parameters ``sid`` and ``root``: building one
    (aliases of the wide sessions table) costs more than running it."""
    sid: BindParameter[str] = bindparam("sid")
    root: BindParameter[str] = bindparam("root")
    if walk == "ancestors" or walk == "descendants":
        tree = {"ancestors": ancestors, "descendants": descendants}[walk]
        return tree(sid, root=root, max_depth=max_depth)
    chain = {"compression_chain": compression_chain, "compression_tip": compression_tip,
             "compression_root": compression_root}[walk]
    return chain(sid, root=root, max_depth=max_depth)


@overload
def run_walk(conn: Executor, walk: TreeWalks, session_id: str, *, root: str | None = None,
             max_depth: int = ...) -> Sequence[Row[str, str | None, int]]: ...
@overload
def run_walk(conn: Executor, walk: ChainWalks, session_id: str, *, root: str | None = None,
             max_depth: int = ...) -> Sequence[Row[str, int]]: ...
def run_walk(conn: Executor, walk: TreeWalks | ChainWalks, session_id: str, *,
             root: str | None = None, max_depth: int = DEFAULT_MAX_DEPTH
             ) -> Sequence[Row[str, str | None, int]] | Sequence[Row[str, int]]:
    """Rows of :func:`prepared` for the session, under its stored root unless ``root`` is
    given (``[]`` for an unknown id)."""
    root = root_of(conn, session_id) if root is None else root
    if root is None:
        return []
    params = {"sid": session_id, "root": root}
    return conn.execute(prepared(walk, max_depth), params).all()


def ancestors_of(conn: Executor, session_id: str, *,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> Sequence[Row[str, str | None, int]]:
    """:func:`ancestors` run for the session's stored root (``[]`` for an unknown id)."""
    return run_walk(conn, "ancestors", session_id, max_depth=max_depth)


def descendants_of(conn: Executor, session_id: str) -> Sequence[Row[str, str | None, int]]:
    return run_walk(conn, "descendants", session_id)


# --------------------------------------------------------------------------- compression chain


def continuation_id(parent_id: ColumnElement[str], parent_ended_at: ColumnElement[float | None],
                    root: Ref) -> ColumnElement[str | None]:
    """The id of the child a compression-ended parent continues in (None if there is none).

    ``root`` is the parent's root (a value, or a column of the walk): children share it."""
    # Normally the continuation starts at or after the parent's end. Clocks and importers do
    # not always agree (the agent's own fixture stores end the parent after creating its child),
    # and a compression-ended parent with children is always continued somewhere: so prefer a
    # child started at/after the end, else the newest child.
    after, any_child = sessions.alias("cont"), sessions.alias("cont_any")
    newest_after = (select(after.c.id)
                    .where(after.c.root_session_id == root,
                           after.c.parent_session_id == parent_id,
                           after.c.started_at >= parent_ended_at)
                    .order_by(after.c.started_at.desc(), after.c.id.desc())
                    .limit(1).scalar_subquery())
    newest = (select(any_child.c.id)
              .where(any_child.c.root_session_id == root,
                     any_child.c.parent_session_id == parent_id)
              .order_by(any_child.c.started_at.desc(), any_child.c.id.desc())
              .limit(1).scalar_subquery())
    return func.coalesce(newest_after, newest)


def compression_chain(session_id: Ref, *, root: Ref | None = None,
                      max_depth: int = DEFAULT_MAX_DEPTH) -> ChainWalk:
    """``(id, depth)`` of the session (depth 0) and its compression continuations, in order."""
    root = _root_or_lookup(session_id, root)
    anchor = select(sessions.c.id, sessions.c.end_reason, sessions.c.ended_at,
                    literal(0).label("depth")).where(sessions.c.root_session_id == root,
                                                     sessions.c.id == session_id)
    walk = anchor.cte("compression_chain", recursive=True)
    nxt = sessions.alias("nxt")
    walk = walk.union_all(
        select(nxt.c.id, nxt.c.end_reason, nxt.c.ended_at, walk.c.depth + 1)
        .join_from(walk, nxt, nxt.c.id == continuation_id(walk.c.id, walk.c.ended_at, root))
        .where(nxt.c.root_session_id == root, walk.c.end_reason == COMPRESSION,
               walk.c.depth < max_depth)
    )
    return select(walk.c.id, walk.c.depth).order_by(walk.c.depth)


def compression_tip(session_id: Ref, *, root: Ref | None = None,
                    max_depth: int = DEFAULT_MAX_DEPTH) -> ChainWalk:
    """The one-row ``(id, depth)`` of the chain's tip (the session itself when not compressed)."""
    chain = compression_chain(session_id, root=root, max_depth=max_depth).subquery("chain")
    return select(chain.c.id, chain.c.depth).order_by(chain.c.depth.desc()).limit(1)


def tip_of(conn: Executor, session_id: str) -> str | None:
    """:func:`compression_tip` run for the session's stored root (None for an unknown id)."""
    rows = run_walk(conn, "compression_tip", session_id)
    return rows[0].id if rows else None


def compression_root(session_id: Ref, *, root: Ref | None = None,
                     max_depth: int = DEFAULT_MAX_DEPTH) -> ChainWalk:
    """The one-row ``(id, depth)`` of the first segment of the chain this session belongs to."""
    root = _root_or_lookup(session_id, root)
    anchor = select(sessions.c.id, sessions.c.parent_session_id,
                    literal(0).label("depth")).where(sessions.c.root_session_id == root,
                                                     sessions.c.id == session_id)
    walk = anchor.cte("compression_up", recursive=True)
    parent = sessions.alias("up")
    walk = walk.union_all(
        select(parent.c.id, parent.c.parent_session_id, walk.c.depth + 1)
        .join_from(walk, parent, parent.c.id == walk.c.parent_session_id)
        .where(parent.c.root_session_id == root, parent.c.end_reason == COMPRESSION,
               walk.c.depth < max_depth,
               continuation_id(parent.c.id, parent.c.ended_at, root) == walk.c.id)
    )
    return select(walk.c.id, walk.c.depth).order_by(walk.c.depth.desc()).limit(1)


def is_continuation(table: FromClause) -> ColumnElement[bool]:
    """True for a row that continues a compression-ended parent (not a lineage root)."""
    parent = sessions.alias("cparent")
    return exists(select(literal(1)).where(
        parent.c.root_session_id == table.c.root_session_id,
        parent.c.id == table.c.parent_session_id, parent.c.end_reason == COMPRESSION,
        continuation_id(parent.c.id, parent.c.ended_at, parent.c.root_session_id)
        == table.c.id))


def lineage_map(conn: Executor | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH,
                compressed_only: bool = False) -> Select[str, str, str, int]:
    """``(id, root_id, depth)`` for every session reachable from a lineage root.

    A root is a session that is not a compression continuation. Sessions caught in a cycle of
    continuations have no root and are absent; callers treat each as its own lineage.
    ``compressed_only`` anchors only at roots that ended ``'compression'`` (the others are a
    chain of one, which a caller that falls back to the row itself can leave out). Each step
    stays within the anchor's stored root.

    Given ``conn`` on a distributed store, the map is walked here instead: Citus runs a
    recursive CTE only with a constant filter on the distribution column, which a walk over
    every tree cannot have. Each row's one step (:func:`continuation_id`) still runs in SQL.
    """
    if conn is not None and distributed_store(conn):
        return _map_walked_here(conn, max_depth, compressed_only)
    s = sessions.alias("s")
    anchor = select(s.c.id, s.c.id.label("root_id"), s.c.root_session_id, s.c.end_reason,
                    s.c.ended_at, literal(0).label("depth")).where(~is_continuation(s))
    if compressed_only:
        anchor = anchor.where(s.c.end_reason == COMPRESSION)
    walk = anchor.cte("lineage_map", recursive=True)
    nxt = sessions.alias("nxt")
    walk = walk.union_all(
        select(nxt.c.id, walk.c.root_id, nxt.c.root_session_id, nxt.c.end_reason,
               nxt.c.ended_at, walk.c.depth + 1)
        .join_from(walk, nxt, and_(
            nxt.c.root_session_id == walk.c.root_session_id,
            nxt.c.id == continuation_id(walk.c.id, walk.c.ended_at, walk.c.root_session_id)))
        .where(walk.c.end_reason == COMPRESSION, walk.c.depth < max_depth)
    )
    return select(walk.c.id, walk.c.root_id, walk.c.root_session_id, walk.c.depth)


def _map_walked_here(conn: Executor, max_depth: int,
                     compressed_only: bool) -> Select[str, str, str, int]:
    s = sessions.alias("s")
    rows = conn.execute(select(
        s.c.id, s.c.root_session_id, s.c.end_reason, is_continuation(s).label("cont"),
        continuation_id(s.c.id, s.c.ended_at, s.c.root_session_id).label("nxt"))).all()
    by_id = {r.id: r for r in rows}
    found: list[tuple[str, str, str, int]] = []
    for anchor in rows:
        if anchor.cont or (compressed_only and anchor.end_reason != COMPRESSION):
            continue
        node: Row[*tuple[Any, ...]] | None = anchor
        depth = 0
        while node is not None:  # as the CTE's UNION ALL: a cycle ends at max_depth
            found.append((node.id, anchor.id, node.root_session_id, depth))
            if node.end_reason != COMPRESSION or depth >= max_depth:
                break
            step = by_id.get(node.nxt)
            node = step if step is not None and step.root_session_id == node.root_session_id \
                else None
            depth += 1
    return walked_rows("lmap_walk", ("id", "root_id", "root_session_id", "depth"), found)


def walked_rows(name: str, names: Sequence[str],
                rows: Sequence[tuple[Any, ...]]) -> Select[*tuple[Any, ...]]:
    """Rows walked in Python as a PostgreSQL row source (one array parameter per column, the
    last column an integer depth), for the walks Citus cannot run as a recursive CTE."""
    columns = list(zip(*rows, strict=True)) or [()] * len(names)
    kinds = [TEXT] * (len(names) - 1) + [Integer]
    walked = func.unnest(*(bindparam(f"{name}_{column}", list(values), type_=ARRAY(kind))
                           for column, values, kind in zip(names, columns, kinds, strict=True)))
    table = walked.table_valued(*names).render_derived(name=name)
    return select(*table.c)


# --------------------------------------------------------------------------- last activity


def _sane(value: ColumnElement[float | None],
          now: float | ColumnElement[float]) -> ColumnElement[float | None]:
    return case((value.between(SANE_MIN_TS, now + SANE_FUTURE_S), value), else_=None)


def newest_message_at(session_id: ColumnElement[str],
                      now: float | ColumnElement[float] | None = None,
                      root: ColumnElement[str] | None = None) -> ScalarSelect[float | None]:
    """The newest sane message timestamp of a session (walks ``idx_messages_session``);
    ``root``, the session's root column, keeps the correlation on one shard on Citus."""
    now = time.time() if now is None else now
    same = distribution.same_root(messages.c.session_id, root) if root is not None else None
    return (select(func.max(messages.c.timestamp))
            .where(messages.c.session_id == session_id,
                   messages.c.timestamp.between(SANE_MIN_TS, now + SANE_FUTURE_S),
                   *([same] if same is not None else []))
            .scalar_subquery())


def last_activity(table: FromClause = sessions,
                  now: float | ColumnElement[float] | None = None,
                  ) -> ColumnElement[float | None]:
    """THE last-activity expression shared by listing, prune, archive, close and export.

    The newest of ``last_activity_at``, the newest message timestamp and ``started_at``, each
    ignored when outside [2000-01-01, now + 1 day]; when all are garbage, ``started_at`` as is.
    ``now`` may be a bound parameter (repo.prepared_build compiles the statement once).
    """
    now = time.time() if now is None else now
    candidates = (
        func.coalesce(_sane(table.c.last_activity_at, now), -1.0),
        func.coalesce(newest_message_at(table.c.id, now, table.c.root_session_id), -1.0),
        func.coalesce(_sane(table.c.started_at, now), -1.0),
    )
    # SQLite's scalar max() returns NULL if any argument is NULL, hence the -1 stand-ins.
    return func.coalesce(func.nullif(greatest(*candidates), -1.0), table.c.started_at)


def lineage_activity(conn: Executor | None = None, *, now: float | None = None,
                     max_depth: int = DEFAULT_MAX_DEPTH,
                     compressed_only: bool = False) -> Select[str, float | None]:
    """``(root_id, last_active)``: the newest activity over every segment of each lineage
    (``compressed_only``: of each lineage whose root ended ``'compression'``)."""
    lmap = lineage_map(conn, max_depth=max_depth,
                       compressed_only=compressed_only).subquery("lmap")
    seg = sessions.alias("seg")
    return (select(lmap.c.root_id, func.max(last_activity(seg, now)).label("last_active"))
            .join_from(lmap, seg, and_(seg.c.root_session_id == lmap.c.root_session_id,
                                       seg.c.id == lmap.c.id))
            .group_by(lmap.c.root_id))
