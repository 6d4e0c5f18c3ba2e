"""Where a session ran: ``cwd``, ``git_branch`` and ``git_repo_root`` on ``sessions``.

Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from sqlalchemy import func, or_, select, update

from hermes_store.db.models import SESSIONS
from hermes_store.repo.executor import rowcount
from hermes_store.repo.sessions import Executor

sessions = SESSIONS


def update_cwd(conn: Executor, session_id: str, cwd: str, git: Mapping[str, str]) -> None:
    """Set ``cwd``, and the git columns given (the facade drops blank ones)."""
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(cwd=cwd, **git))


class WorkingDirectory(TypedDict):
    """One row of :func:`distinct_cwds`."""

    cwd: str
    sessions: int
    last_active: float | None


def distinct_cwds(conn: Executor, *, include_archived: bool) -> list[WorkingDirectory]:
    """Each distinct non-blank ``cwd`` (exact text) over every session, children included:
    how many sessions ran there and when the latest of them ended (else started)."""
    query = (select(sessions.c.cwd, func.count().label("sessions"),
                    func.max(func.coalesce(sessions.c.ended_at, sessions.c.started_at))
                    .label("last_active"))
             .where(sessions.c.cwd.is_not(None), func.trim(sessions.c.cwd) != "")
             .group_by(sessions.c.cwd))
    if not include_archived:
        query = query.where(func.coalesce(sessions.c.archived, 0) == 0)
    return [{"cwd": r.cwd, "sessions": int(r.sessions), "last_active": r.last_active}
            for r in conn.execute(query)]


def backfill_repo_roots(conn: Executor, cwd_to_root: Mapping[str, str]) -> int:
    """Fill ``git_repo_root`` where it is NULL or blank, for sessions in exactly that ``cwd``."""
    changed = 0
    for cwd, root in cwd_to_root.items():
        changed += rowcount(conn.execute(
            update(sessions)
            .where(sessions.c.cwd == cwd,
                   or_(sessions.c.git_repo_root.is_(None), sessions.c.git_repo_root == ""))
            .values(git_repo_root=root)))
    return changed


def workspace_key(row: Mapping[str, Any]) -> str | None:
    """The workspace a session belongs to: its repository root, else its working directory
    (each stripped; blank counts as absent); the branch is ignored."""
    for name in ("git_repo_root", "cwd"):
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
