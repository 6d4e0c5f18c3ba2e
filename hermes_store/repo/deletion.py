"""Deleting sessions: by id for ``hermes-store delete`` (the plan shown before the prompt, and
the write that re-checks it), and the v21 API's deletes and sweeps.

A session is deleted with its whole compression lineage (one conversation); its delegate and
branch children go too unless ``keep_children``, which detaches them. Pinned sessions need
``force``; a session that wrote within the busy window may be in a live turn and is refused.
The write recomputes the plan inside its transaction and refuses when anything differs from
what was previewed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from sqlalchemy import ColumnElement, delete, exists, func, or_, select

from hermes_store.errors import PlanChangedError, StoreBusyError, UsageError
from hermes_store.repo import compression, delegates, lineage, retention
from hermes_store.repo.executor import Executor, rowcount

sessions = lineage.sessions
messages = lineage.messages


class DeletePlanJson(TypedDict):
    """A delete plan in the ``delete`` command's JSON (docs/cli.md#json-output)."""

    matched: int
    ids: list[str]
    detached: list[str]
    messages: int


@dataclass
class DeleteRow:
    id: str
    title: str | None
    pinned: bool
    ended_at: float | None
    last_active: float | None
    messages: int


@dataclass
class DeletePlan:
    """The lineages of the named sessions (``segments``) and the sessions below them
    (``children``), each with the row a preview shows."""

    segments: list[str]
    children: list[str]
    keep_children: bool
    rows: dict[str, DeleteRow]
    busy: list[str]

    @property
    def doomed(self) -> list[str]:
        return self.segments + ([] if self.keep_children else self.children)

    @property
    def detached(self) -> list[str]:
        return self.children if self.keep_children else []

    @property
    def pinned(self) -> list[str]:
        return [sid for sid in self.doomed if self.rows[sid].pinned]

    @property
    def messages(self) -> int:
        return sum(self.rows[sid].messages for sid in self.doomed)

    def check(self, *, force: bool) -> None:
        """Refuse a live session (busy) and, without ``force``, pinned ones."""
        if self.busy:
            raise StoreBusyError(f"{', '.join(self.busy)} wrote in the last minute and may be "
                                 "in a live turn; end it (or wait) and try again")
        if self.pinned and not force:
            raise UsageError("pinned sessions are deleted only with --force")

    def to_dict(self) -> DeletePlanJson:
        return {"matched": len(self.doomed), "ids": self.doomed, "detached": self.detached,
                "messages": self.messages}


def plan_delete(conn: Executor, ids: Sequence[str], *, keep_children: bool = False,
                busy_window_s: float = retention.DEFAULT_BUSY_WINDOW_S,
                now: float | None = None) -> DeletePlan:
    """What deleting ``ids`` removes: their lineages and (unless ``keep_children``) everything
    below them."""
    now = time.time() if now is None else now
    segments: list[str] = []
    for sid in ids:
        segments += retention.lineage_of(conn, sid) or [sid]
    segments = list(dict.fromkeys(segments))
    below: list[str] = []
    for sid in segments:
        below += [r.id for r in lineage.descendants_of(conn, sid) if r.id not in segments]
    below = list(dict.fromkeys(below))
    counted = select(func.count()).where(messages.c.session_id == sessions.c.id)
    rows = {r.id: DeleteRow(r.id, r.title, bool(r.pinned), r.ended_at, r.last_active,
                            int(r.messages))
            for r in conn.execute(
                select(sessions.c.id, sessions.c.title, sessions.c.pinned, sessions.c.ended_at,
                       lineage.last_activity(sessions, now).label("last_active"),
                       counted.scalar_subquery().label("messages"))
                .where(sessions.c.id.in_(segments + below)))}
    doomed = segments + ([] if keep_children else below)
    since = now - busy_window_s
    busy = [sid for sid in doomed if rows[sid].ended_at is None
            and (rows[sid].last_active or 0) > since]
    return DeletePlan(segments, below, keep_children, rows, busy)


def delete_as_planned(conn: Executor, ids: Sequence[str], plan: DeletePlan, *,
                      force: bool = False) -> int:
    """Delete what ``plan`` showed, in the caller's write transaction; refuse (nothing written)
    when the store changed since: other sessions, a live one, or one pinned meanwhile."""
    current = plan_delete(conn, ids, keep_children=plan.keep_children)
    if current.busy:
        raise StoreBusyError(f"{', '.join(current.busy)} wrote since the preview and may be "
                             "in a live turn; end it (or wait) and try again")
    if current.doomed != plan.doomed:
        raise PlanChangedError("the sessions to delete changed since the preview; nothing "
                               "was deleted: run the command again")
    newly_pinned = [sid for sid in current.pinned if sid not in plan.pinned]
    if newly_pinned:
        raise PlanChangedError(f"{', '.join(newly_pinned)} pinned since the preview; "
                               "nothing was deleted: run the command again")
    current.check(force=force)
    return retention.delete_sessions(conn, current.doomed)


# --------------------------------------------------------------------------- the v21 verbs
# docs/v21.md#bulk: explicit deletes take subagents along (the delegate cascade) and orphan
# every other child; the sweeps orphan all children and skip lineages with a pinned segment.

GHOST_SOURCE = "tui"
GHOST_AGE_S = 86400.0


@dataclass
class Deleted:
    """What a delete removed: the listed ids that existed, and every session that went."""

    listed: list[str]
    ids: list[str]


def existing(conn: Executor, ids: Sequence[str]) -> list[str]:
    """The ids present in ``sessions``, in the given order."""
    found: set[str] = set()
    for start in range(0, len(ids), 900):
        chunk = list(ids[start:start + 900])
        found.update(conn.execute(select(sessions.c.id).where(sessions.c.id.in_(chunk)))
                     .scalars())
    return [sid for sid in ids if sid in found]


def delete_with_delegates(conn: Executor, ids: Sequence[str]) -> Deleted:
    """Delete the sessions that exist among ``ids``, open, archived or pinned, with their
    subagents; other children are orphaned, usage rows and topic bindings cascade."""
    listed = existing(conn, list(dict.fromkeys(ids)))
    doomed = listed + delegates.cascade(conn, listed)
    retention.delete_sessions(conn, doomed)
    return Deleted(listed, doomed)


def delete_if_empty(conn: Executor, session_id: str) -> bool:
    """One statement: the session goes only if it has no title, no message row and no child
    (so a racing append or child keeps it)."""
    child = sessions.alias("empty_child")
    result = conn.execute(delete(sessions).where(
        sessions.c.id == session_id,
        or_(sessions.c.title.is_(None), sessions.c.title == ""),
        ~exists(select(messages.c.id).where(messages.c.session_id == session_id)),
        ~exists(select(child.c.id).where(child.c.parent_session_id == session_id))))
    return bool(rowcount(result))


def outside_pinned_lineages(conn: Executor, ids: Sequence[str]) -> list[str]:
    """``ids`` less those whose lineage (docs/v21.md#bulk) holds a pinned segment."""
    if not ids:
        return []
    pinned = list(conn.execute(select(sessions.c.id).where(
        func.coalesce(sessions.c.pinned, 0) != 0)).scalars())
    if not pinned:
        return list(ids)
    roots = compression.lineage_roots(conn)
    kept = {roots.get(sid, (sid, 0))[0] for sid in pinned}
    return [sid for sid in ids if roots.get(sid, (sid, 0))[0] not in kept]


def _swept(conn: Executor, *where: ColumnElement[bool]) -> list[str]:
    ids = list(conn.execute(select(sessions.c.id).where(
        *where, func.coalesce(sessions.c.pinned, 0) == 0).order_by(sessions.c.id)).scalars())
    return outside_pinned_lineages(conn, ids)


def empty_sessions(conn: Executor) -> list[str]:
    """Ended, unarchived, unpinned sessions whose message counter is 0."""
    return _swept(conn, func.coalesce(sessions.c.message_count, 0) == 0,
                  sessions.c.ended_at.is_not(None), func.coalesce(sessions.c.archived, 0) == 0)


def ghost_sessions(conn: Executor, *, now: float) -> list[str]:
    """The TUI's ghosts: untitled ``tui`` sessions, ended, started over a day ago, without a
    message row, unpinned."""
    return _swept(conn, sessions.c.source == GHOST_SOURCE,
                  or_(sessions.c.title.is_(None), sessions.c.title == ""),
                  sessions.c.ended_at.is_not(None), sessions.c.started_at < now - GHOST_AGE_S,
                  ~exists(select(messages.c.id).where(messages.c.session_id == sessions.c.id)))


def sweep(conn: Executor, ids: Sequence[str]) -> list[str]:
    """Delete swept sessions, children orphaned first (never deleted with them)."""
    retention.delete_sessions(conn, ids)
    return list(ids)
