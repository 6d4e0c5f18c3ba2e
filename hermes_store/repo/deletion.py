"""Deleting sessions by id (``hermes-store delete``): the plan shown before the prompt, and the
write that re-checks it.

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
from typing import Any

from sqlalchemy import func, select

from hermes_store.errors import PlanChangedError, StoreBusyError, UsageError
from hermes_store.repo import lineage, retention
from hermes_store.repo.sessions import Executor

sessions = lineage.sessions
messages = lineage.messages


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

    def to_dict(self) -> dict[str, Any]:
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
        below += [r.id for r in conn.execute(lineage.descendants(sid)) if r.id not in segments]
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
