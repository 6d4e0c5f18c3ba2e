"""Handoff: moving a live session to another platform, as a small state machine on ``sessions``
(``handoff_state``, ``handoff_platform``, ``handoff_error``).

NULL → ``pending`` → ``running`` → ``completed`` | ``failed``; a terminal state may be requested
again. Each transition is one conditional ``UPDATE``, so of two racing claimers exactly one
changes the row. Functions take a caller-owned ``Connection`` and never commit.
"""

from __future__ import annotations

from typing import Any, TypedDict

from sqlalchemy import Select, literal_column, or_, select, update

from hermes_store.db.models import SESSIONS
from hermes_store.repo.executor import rowcount
from hermes_store.repo.sessions import Executor, full_row

sessions = SESSIONS

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"
REQUESTABLE = (COMPLETED, FAILED)
MAX_ERROR_CHARS = 500


def request(conn: Executor, session_id: str, platform: str | None) -> bool:
    state = sessions.c.handoff_state
    result = conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, or_(state.is_(None), state.in_(REQUESTABLE)))
        .values(handoff_state=PENDING, handoff_platform=platform, handoff_error=None))
    return bool(rowcount(result))


def claim(conn: Executor, session_id: str) -> bool:
    result = conn.execute(update(sessions)
                          .where(sessions.c.id == session_id,
                                 sessions.c.handoff_state == PENDING)
                          .values(handoff_state=RUNNING))
    return bool(rowcount(result))


def complete(conn: Executor, session_id: str) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(handoff_state=COMPLETED, handoff_error=None))


def fail(conn: Executor, session_id: str, error: str) -> None:
    conn.execute(update(sessions).where(sessions.c.id == session_id)
                 .values(handoff_state=FAILED, handoff_error=error[:MAX_ERROR_CHARS]))


class HandoffState(TypedDict):
    state: str | None
    platform: str | None
    error: str | None


def state(conn: Executor, session_id: str) -> HandoffState | None:
    row = conn.execute(select(sessions.c.handoff_state, sessions.c.handoff_platform,
                              sessions.c.handoff_error)
                       .where(sessions.c.id == session_id)).first()
    if row is None:
        return None
    return {"state": row[0], "platform": row[1], "error": row[2]}


def pending(conn: Executor) -> list[dict[str, Any]]:
    """Session rows waiting for a handoff, oldest first (``idx_sessions_handoff_state``)."""
    query: Select[*tuple[Any, ...]] = (
        select(literal_column("*")).select_from(sessions)
        .where(sessions.c.handoff_state == PENDING)
        .order_by(sessions.c.started_at, sessions.c.id))
    return [full_row(r) for r in conn.execute(query).mappings()]
